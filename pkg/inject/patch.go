package inject

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
)

// createPatch returns the JSON patch from orig to mutated. Both are the same
// Go type, so fields this version of the API types does not know are never
// touched. Mutate changes only labels, annotations and four lists of the
// spec, and keeps the pod's own list items in order, so the patch is built
// from those parts alone: new items are added, a changed item of the pod
// is diffed on its own. Anything else falls back to diffing whole pods.
func createPatch(orig, mutated *corev1.Pod) ([]jsonpatch.Operation, error) {
	if ops, ok, err := partsPatch(orig, mutated); err != nil || ok {
		return ops, err
	}
	return diffPatch("", orig, mutated)
}

// diffPatch diffs the JSON of a and b and puts prefix before every path.
func diffPatch(prefix string, a, b any) ([]jsonpatch.Operation, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode pod: %w", err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode injected pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(ja, jb)
	if err != nil {
		return nil, fmt.Errorf("create patch: %w", err)
	}
	for i := range ops {
		ops[i].Path = prefix + ops[i].Path
	}
	return ops, nil
}

// partsPatch builds the patch from the parts Mutate changes; ok is false
// when the pods differ in any other way.
func partsPatch(orig, mutated *corev1.Pod) (ops []jsonpatch.Operation, ok bool, err error) {
	if !sameOutsideParts(orig, mutated) {
		return nil, false, nil
	}
	ops = mapOps(ops, "/metadata/labels", orig.Labels, mutated.Labels)
	ops = mapOps(ops, "/metadata/annotations", orig.Annotations, mutated.Annotations)
	containerKey := func(c corev1.Container) string { return c.Name }
	steps := []func([]jsonpatch.Operation) ([]jsonpatch.Operation, bool, error){
		func(o []jsonpatch.Operation) ([]jsonpatch.Operation, bool, error) {
			return listOps(o, "/spec/initContainers", orig.Spec.InitContainers, mutated.Spec.InitContainers, containerKey)
		},
		func(o []jsonpatch.Operation) ([]jsonpatch.Operation, bool, error) {
			return listOps(o, "/spec/containers", orig.Spec.Containers, mutated.Spec.Containers, containerKey)
		},
		func(o []jsonpatch.Operation) ([]jsonpatch.Operation, bool, error) {
			return listOps(o, "/spec/volumes", orig.Spec.Volumes, mutated.Spec.Volumes, volumeKey)
		},
		func(o []jsonpatch.Operation) ([]jsonpatch.Operation, bool, error) {
			return listOps(o, "/spec/imagePullSecrets", orig.Spec.ImagePullSecrets, mutated.Spec.ImagePullSecrets,
				func(r corev1.LocalObjectReference) string { return r.Name })
		},
	}
	for _, step := range steps {
		if ops, ok, err = step(ops); err != nil || !ok {
			return nil, ok, err
		}
	}
	return ops, true, nil
}

// sameOutsideParts reports whether the pods are equal but for labels,
// annotations and the four lists.
func sameOutsideParts(a, b *corev1.Pod) bool {
	strip := func(p *corev1.Pod) corev1.Pod {
		c := *p
		c.Labels, c.Annotations = nil, nil
		c.Spec.InitContainers, c.Spec.Containers, c.Spec.Volumes, c.Spec.ImagePullSecrets = nil, nil, nil, nil
		return c
	}
	sa, sb := strip(a), strip(b)
	return reflect.DeepEqual(&sa, &sb)
}

// mapOps adds, replaces and removes the keys of a string map. A map that
// was empty is absent from the JSON (omitempty), so it is added whole.
func mapOps(ops []jsonpatch.Operation, path string, a, b map[string]string) []jsonpatch.Operation {
	if len(a) == 0 {
		if len(b) > 0 {
			ops = append(ops, jsonpatch.NewOperation("add", path, b))
		}
		return ops
	}
	if len(b) == 0 {
		return append(ops, jsonpatch.NewOperation("remove", path, nil))
	}
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		old, found := a[k]
		switch {
		case !found:
			ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escapePointer(k), b[k]))
		case old != b[k]:
			ops = append(ops, jsonpatch.NewOperation("replace", path+"/"+escapePointer(k), b[k]))
		}
	}
	removed := []string{}
	for k := range a {
		if _, found := b[k]; !found {
			removed = append(removed, k)
		}
	}
	sort.Strings(removed)
	for _, k := range removed {
		ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escapePointer(k), nil))
	}
	return ops
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// listOps patches list a into list b when b keeps a's items, by key and in
// order, and only adds items: changed items of a are diffed at their index
// first, then the new items are inserted at their final index, in order.
// ok is false for any other change.
func listOps[T any](ops []jsonpatch.Operation, path string, a, b []T, key func(T) string) ([]jsonpatch.Operation, bool, error) {
	if len(a) == 0 {
		if len(b) > 0 {
			ops = append(ops, jsonpatch.NewOperation("add", path, b))
		}
		return ops, true, nil
	}
	seen := make(map[string]bool, len(b))
	for _, x := range b {
		if seen[key(x)] {
			return nil, false, nil
		}
		seen[key(x)] = true
	}
	var added []int
	j := 0
	for k := range b {
		if j < len(a) && key(a[j]) == key(b[k]) {
			if !reflect.DeepEqual(&a[j], &b[k]) {
				d, err := diffPatch(path+"/"+strconv.Itoa(j), &a[j], &b[k])
				if err != nil {
					return nil, false, err
				}
				ops = append(ops, d...)
			}
			j++
			continue
		}
		added = append(added, k)
	}
	if j != len(a) {
		return nil, false, nil // an item of a was dropped or moved
	}
	for _, k := range added {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+strconv.Itoa(k), b[k]))
	}
	return ops, true, nil
}
