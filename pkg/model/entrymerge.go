package model

import (
	"maps"
	"slices"
)

// Two ServiceEntries of one namespace for one host, as Istio's sidecar
// scope and endpoint index take them: the older entry's service stands;
// the newer one adds to it the ports of numbers it lacks, when the two
// could be one service (Istio's canMergeServices: the same resolution,
// workloadSelector and exportTo), and its endpoints join the service's
// ports of the same name, which Istio's endpoint index, keyed by host and
// namespace, holds together. Entries that could not be one service stay
// apart: the newer is left out and noted, as before.

// mergeEntry merges into prev, the service of an older entry of the same
// namespace for host, the entry se's ports and endpoints (eps, by its
// port numbers) where Istio would; false when it would not, and prev is
// unchanged.
//
// Entries with different addresses are not merged: Istio's listeners
// then serve each entry's ports on its own addresses (its egress
// listeners hold the entries apart; only its clusters see them merged),
// which one service cannot say. Those stay refused and noted.
func mergeEntry(prev *Service, se *ServiceEntry, ports []Port, eps map[uint32][]Endpoint) bool {
	if prev == nil || prev.Entry == nil || prev.Namespace != se.Namespace ||
		!sameSet(prev.Addresses, entryAddresses(se.Spec.GetAddresses())) ||
		prev.Entry.Resolution != se.Spec.GetResolution() ||
		!maps.Equal(prev.Selector, se.Spec.GetWorkloadSelector().GetLabels()) ||
		!sameSet(prev.ExportTo, se.Spec.GetExportTo()) {
		return false
	}
	for _, p := range ports {
		if !slices.ContainsFunc(prev.Ports, func(q Port) bool { return q.Port == p.Port }) {
			prev.Ports = append(prev.Ports, p)
		}
	}
	if prev.Endpoints == nil {
		prev.Endpoints = map[uint32][]Endpoint{}
	}
	for _, p := range ports {
		for _, q := range prev.Ports {
			if q.Name == p.Name {
				prev.Endpoints[q.Port] = append(prev.Endpoints[q.Port], eps[p.Port]...)
			}
		}
	}
	return true
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(slices.Compact(as), slices.Compact(bs))
}
