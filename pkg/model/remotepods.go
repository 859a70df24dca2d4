package model

import "slices"

// RemotePod returns the pod namespace/name of remote cluster's registry,
// or nil, and whether the snapshot holds that cluster's registry at all:
// false for a cluster not registered, or whose pods have not been read
// yet. The local cluster's pods are never looked at (Pod looks there).
func (s *Snapshot) RemotePod(cluster, namespace, name string) (pod *Pod, known bool) {
	pods, ok := s.res.RemotePods[cluster]
	if !ok {
		return nil, false
	}
	return findPod(pods, namespace, name), true
}

// findPod is the pod namespace/name of pods, sorted by namespace and
// name, or nil.
func findPod(pods []*Pod, namespace, name string) *Pod {
	m := Meta{Name: name, Namespace: namespace}
	if i, ok := slices.BinarySearchFunc(pods, m, func(p *Pod, m Meta) int { return byMeta(p.Meta, m) }); ok {
		return pods[i]
	}
	return nil
}

// remotePodChanges adds to out the pods of remote clusters' registries
// added, removed or changed from old to new: every pod of a cluster that
// joined or left.
func remotePodChanges(old, new map[string][]*Pod, out map[Meta]bool) map[Meta]bool {
	for id, pods := range new {
		was := old[id]
		if len(was) == len(pods) && (len(pods) == 0 || &was[0] == &pods[0]) {
			continue // the same list: the cluster's pods did not change
		}
		out = addMetas(out, podChanges(was, pods))
	}
	for id, pods := range old {
		if _, ok := new[id]; !ok {
			out = addMetas(out, podChanges(pods, nil))
		}
	}
	return out
}

// addMetas adds o to out; o, made for the call, may become out.
func addMetas(out, o map[Meta]bool) map[Meta]bool {
	if out == nil {
		return o
	}
	for m := range o {
		out[m] = true
	}
	return out
}

// HasRemotePods reports whether the snapshot holds the registry of pods
// of remote cluster id.
func (s *Snapshot) HasRemotePods(id string) bool {
	_, ok := s.res.RemotePods[id]
	return ok
}
