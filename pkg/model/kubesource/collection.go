package kubesource

import (
	"cmp"
	"crypto/sha256"
	"maps"
	"slices"
	"strings"
)

// collection is one kind's part of the snapshots: the model objects made
// of its cached objects, sorted by namespace and name, each with the
// object it was made of and its digest. A rebuild makes again only the
// objects events touched; snapshots share the rest, and the slices of an
// unchanged kind.
type collection[K comparable, V any] struct {
	keys    []string // "<namespace>/<name>"
	from    []K
	items   []V
	digests [][sha256.Size]byte
	digest  [sha256.Size]byte // of the kind: its objects' digests in order
}

// kindSource tells a collection how to read and make its kind.
type kindSource[K comparable, V any] struct {
	list func() []K
	// get returns the cached object namespace/name, if any.
	get func(namespace, name string) (K, bool)
	key func(K) string
	// make is what the model keeps of an object; false leaves it out.
	make   func(K) (V, bool)
	digest func(V) [sha256.Size]byte
	// sameObject: an item made of the very object the cache still holds
	// is current. Not so for a Service, whose endpoints read other
	// objects.
	sameObject bool
}

// update brings c up to date with the caches: every object again when
// all, else those of keys only. It reports whether anything changed.
func (c *collection[K, V]) update(src kindSource[K, V], all bool, keys map[string]bool) bool {
	if all {
		return c.rebuild(src)
	}
	if len(keys) == 0 {
		return false
	}
	changed := false
	cloned := false
	for _, key := range slices.SortedFunc(maps.Keys(keys), compareKeys) {
		i, found := slices.BinarySearchFunc(c.keys, key, compareKeys)
		ns, name, _ := strings.Cut(key, "/")
		obj, ok := src.get(ns, name)
		var v V
		if ok {
			if found && src.sameObject && c.from[i] == obj {
				continue
			}
			v, ok = src.make(obj)
		}
		if !ok && !found {
			continue
		}
		if !cloned { // the last snapshot holds the old items; nothing else is shared
			c.items = slices.Clone(c.items)
			cloned = true
		}
		changed = true
		switch {
		case !ok:
			c.keys, c.from, c.items, c.digests = slices.Delete(c.keys, i, i+1), slices.Delete(c.from, i, i+1),
				slices.Delete(c.items, i, i+1), slices.Delete(c.digests, i, i+1)
		case found:
			c.from[i], c.items[i], c.digests[i] = obj, v, src.digest(v)
		default:
			c.keys, c.from, c.items, c.digests = slices.Insert(c.keys, i, key), slices.Insert(c.from, i, obj),
				slices.Insert(c.items, i, v), slices.Insert(c.digests, i, src.digest(v))
		}
	}
	if !changed {
		return false
	}
	if len(c.keys) == 0 { // as rebuild leaves an empty kind
		c.keys, c.from, c.items, c.digests = nil, nil, nil, nil
	}
	c.sum()
	return true
}

// rebuild makes the collection again from every cached object, keeping
// the items of objects unchanged when the kind allows it.
func (c *collection[K, V]) rebuild(src kindSource[K, V]) bool {
	objs := src.list()
	slices.SortFunc(objs, func(a, b K) int { return compareKeys(src.key(a), src.key(b)) })
	var next collection[K, V]
	for _, obj := range objs {
		key := src.key(obj)
		if i, found := slices.BinarySearchFunc(c.keys, key, compareKeys); found && src.sameObject && c.from[i] == obj {
			next.keys, next.from = append(next.keys, key), append(next.from, obj)
			next.items, next.digests = append(next.items, c.items[i]), append(next.digests, c.digests[i])
			continue
		}
		v, ok := src.make(obj)
		if !ok {
			continue
		}
		next.keys, next.from, next.items, next.digests = append(next.keys, key), append(next.from, obj),
			append(next.items, v), append(next.digests, src.digest(v))
	}
	next.sum()
	changed := next.digest != c.digest
	*c = next
	return changed
}

func (c *collection[K, V]) sum() {
	h := &hasher{h: sha256.New()}
	h.count(len(c.digests))
	for i := range c.digests {
		h.h.Write(c.digests[i][:]) // in place: a copy would escape to the heap
	}
	c.digest = h.sum()
}

// compareKeys orders "<namespace>/<name>" keys by namespace, then name.
func compareKeys(a, b string) int {
	ans, an, _ := strings.Cut(a, "/")
	bns, bn, _ := strings.Cut(b, "/")
	return cmp.Or(cmp.Compare(ans, bns), cmp.Compare(an, bn))
}
