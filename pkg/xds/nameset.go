package xds

import (
	"runtime"
	"slices"
	"sync"
	"weak"
)

// nameSet is a sorted set of resource names an incremental stream
// subscribes to. It is immutable and shared: a thousand sidecars of a mesh
// subscribe to the same thousand clusters' endpoints, and hold one set
// between them rather than a thousand.
type nameSet struct {
	names []string // sorted, without duplicates
	key   string   // namesKey(names)
}

// contains reports whether name is in s; s may be nil, the empty set.
func (s *nameSet) contains(name string) bool {
	if s == nil {
		return false
	}
	_, ok := slices.BinarySearch(s.names, name)
	return ok
}

// all yields the names of s in order; s may be nil.
func (s *nameSet) all(yield func(string) bool) {
	if s == nil {
		return
	}
	for _, n := range s.names {
		if !yield(n) {
			return
		}
	}
}

// subscription is s as the response cache asks for it.
func (s *nameSet) subscription(wildcard bool) subscription {
	if s == nil {
		return subscription{wildcard: wildcard}
	}
	return subscription{names: s.names, key: s.key, wildcard: wildcard}
}

// nameSets interns name sets: while a stream holds a set, every stream
// subscribing to the same names gets the same one. A set no stream holds
// any longer is collected, and its entry with it.
type nameSets struct {
	mu   sync.Mutex
	sets map[string]weak.Pointer[nameSet] // by key
	// steps are the results of recent small updates: after a change, the
	// streams that held one set subscribe to the same new names (a
	// cluster added, its load assignment asked for), and all but the
	// first get the set the first made, without copying and keying the
	// whole set again.
	steps map[nameStep]weak.Pointer[nameSet]
}

// nameStep is one update of a set: the set, and the names added and
// removed as the request listed them (namesKey of each).
type nameStep struct {
	old         weak.Pointer[nameSet]
	add, remove string
}

const (
	maxStepNames = 16   // names in an update remembered as a step
	maxSteps     = 1024 // steps remembered; past it they are forgotten
)

// update returns old with add subscribed and then remove unsubscribed
// ("*" is not a name: the caller handles it), interned. Names are the
// caller's to keep; the set holds its own slice.
func (t *nameSets) update(old *nameSet, add, remove []string) *nameSet {
	if len(add) == 0 && (len(remove) == 0 || old == nil) {
		return old
	}
	if len(add)+len(remove) > maxStepNames {
		return t.apply(old, add, remove)
	}
	step := nameStep{old: weak.Make(old), add: namesKey(add), remove: namesKey(remove)}
	t.mu.Lock()
	s := t.steps[step].Value()
	t.mu.Unlock()
	if s != nil {
		return s
	}
	s = t.apply(old, add, remove)
	if s == nil || s == old {
		return s
	}
	t.mu.Lock()
	if t.steps == nil || len(t.steps) >= maxSteps {
		t.steps = map[nameStep]weak.Pointer[nameSet]{}
	}
	t.steps[step] = weak.Make(s)
	t.mu.Unlock()
	return s
}

// apply is update, computed.
func (t *nameSets) apply(old *nameSet, add, remove []string) *nameSet {
	var names []string
	if old != nil {
		names = slices.Grow(slices.Clone(old.names), len(add))
	}
	for _, n := range add {
		if n != "*" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(remove) > 0 {
		gone := slices.Clone(remove)
		slices.Sort(gone)
		names = slices.DeleteFunc(names, func(n string) bool {
			_, ok := slices.BinarySearch(gone, n)
			return ok
		})
	}
	if old != nil && slices.Equal(names, old.names) {
		return old
	}
	return t.intern(slices.Clip(names))
}

// intern returns the set of sorted, the one already held if any.
func (t *nameSets) intern(sorted []string) *nameSet {
	if len(sorted) == 0 {
		return nil
	}
	key := namesKey(sorted)
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sets[key].Value(); s != nil {
		return s
	}
	if t.sets == nil {
		t.sets = map[string]weak.Pointer[nameSet]{}
	}
	s := &nameSet{names: sorted, key: key}
	t.sets[key] = weak.Make(s)
	runtime.AddCleanup(s, t.forget, key)
	return s
}

// forget drops the entry of key once its set is collected, unless the key
// was interned again since.
func (t *nameSets) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.sets[key]; ok && wp.Value() == nil {
		delete(t.sets, key)
	}
}

// len is the number of sets interned, collected ones not yet forgotten
// included.
func (t *nameSets) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sets)
}
