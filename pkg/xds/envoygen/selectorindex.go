package envoygen

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// selectorIndex finds the services whose selector matches a workload's
// labels without matching the selector of every service of the mesh:
// the services with a selector, by the value of the first key (in order)
// of their selector. A workload's candidates are those filed under the
// value of one of its labels; every service it matches is among them.
// Built once per snapshot and shared by the proxies of it
// (sharedSelectorIndex).
type selectorIndex struct {
	services []*model.Service // the snapshot's, by hostname
	// last is, by value, 1 + the position of the last service filed
	// under it; next, by position, 1 + that of the one filed before it
	// (0: none).
	last map[string]int32
	next []int32
}

func newSelectorIndex(snap *model.Snapshot) *selectorIndex {
	services := snap.Services()
	x := &selectorIndex{services: services, last: make(map[string]int32, len(services)), next: make([]int32, len(services))}
	for i, svc := range services {
		first, found := "", false
		for k := range svc.Selector {
			if !found || k < first {
				first, found = k, true
			}
		}
		if found {
			v := svc.Selector[first]
			x.next[i] = x.last[v]
			x.last[v] = int32(i) + 1
		}
	}
	return x
}

// selecting returns the services of namespace ns whose selector (not
// empty) matches labels, by hostname.
func (x *selectorIndex) selecting(ns string, labels map[string]string) []*model.Service {
	var at []int32
	for _, v := range labels {
		for n := x.last[v]; n != 0; n = x.next[n-1] {
			at = append(at, n-1)
		}
	}
	slices.Sort(at)
	var out []*model.Service
	for i, n := range at {
		if i > 0 && n == at[i-1] {
			continue // filed under a value two labels share
		}
		if svc := x.services[n]; svc.Namespace == ns && model.Matches(svc.Selector, labels) {
			out = append(out, svc)
		}
	}
	return out
}

// selectingServices returns the services of b's proxy's namespace whose
// selector matches its labels, by hostname.
func (b *builder) selectingServices() []*model.Service {
	return sharedSelectorIndex(b.snap).selecting(b.p.Namespace, b.p.Labels)
}

// selectorIndexKey names the selectorIndex among the values a snapshot
// shares.
type selectorIndexKey struct{}

// sharedSelectorIndex is snap's selectorIndex, built once per snapshot.
func sharedSelectorIndex(snap *model.Snapshot) *selectorIndex {
	return model.SharedValue(snap, selectorIndexKey{}, func() *selectorIndex { return newSelectorIndex(snap) })
}
