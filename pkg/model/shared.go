package model

import "sync"

// maxShared bounds the values one snapshot keeps (SharedValue): past it,
// values are built for each caller and not kept. The callers' keys are
// bounded by what the snapshot holds (a Sidecar and a namespace, say);
// the bound guards a key space that is not.
const maxShared = 1 << 14

// sharedValues are the values derived from a snapshot that the proxies
// generating from it share, by key, each built once when first asked
// for. A snapshot is never changed, so neither is a value once built;
// they go with the snapshot.
type sharedValues struct {
	mu sync.Mutex
	m  map[any]*sharedValue
}

type sharedValue struct {
	once sync.Once
	v    any
}

// SharedValue returns the value of key derived from s, built by build the
// first time it is asked for and then shared by every caller, concurrent
// ones included (they wait for the one building it), for as long as s
// lives. key must be comparable and of a type of the caller's own (an
// unexported struct type, say), so that two packages' keys never meet;
// build must read s alone (and what key names), never a proxy, for the
// value is any proxy's. What SharedValue returns is not to be changed.
func SharedValue[T any](s *Snapshot, key any, build func() T) T {
	e := s.shared.entry(key)
	if e == nil {
		return build()
	}
	e.once.Do(func() { e.v = build() })
	return e.v.(T)
}

// entry is key's entry, made if need be; nil when s keeps no shared
// values (a Snapshot not assembled) or holds maxShared already.
func (sv *sharedValues) entry(key any) *sharedValue {
	if sv == nil {
		return nil
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	e, ok := sv.m[key]
	if !ok {
		if len(sv.m) >= maxShared {
			return nil
		}
		if sv.m == nil {
			sv.m = map[any]*sharedValue{}
		}
		e = &sharedValue{}
		sv.m[key] = e
	}
	return e
}

// Index builds now the indexes s otherwise builds when first asked for
// (of its DestinationRules and of its Sidecars), as Istio builds its push
// context's before generating for any proxy.
func (s *Snapshot) Index() {
	s.ruleIndex()
	s.sidecarIndex()
}
