package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/generation"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// pushState is one model snapshot with its marshalled resources, shared by
// every proxy that generates from it.
type pushState struct {
	snap      *model.Snapshot
	changedAt time.Time // first model change this push carries; zero at start
	// mesh is the mesh generation snap is seen with; nil: the one in force
	mesh *generation.Mesh

	// seq numbers push states in the order they were pushed; the server's
	// history says what each changed (incremental.go).
	seq uint64

	mu            sync.Mutex
	built         map[string]*builtResource
	shared        map[sharedKey]*response
	sharedBytes   int
	byContent     map[string]*response // by type URL and version; see canonical
	sinceCache    map[uint64]sinceResult
	affectedCache map[affectedKey]affectedNames
	seesCache     map[seesKey]bool
}

type builtResource struct {
	once sync.Once
	any  *anypb.Any
	hash string
	err  error
	// delta is the resource as incremental responses carry it, one for
	// every response that sends it: the codec references its bytes, so
	// that no response keeps a copy of them.
	delta *discovery.Resource
}

func newPushState(snap *model.Snapshot, changedAt time.Time) *pushState {
	return &pushState{snap: snap, changedAt: changedAt, built: make(map[string]*builtResource), shared: make(map[sharedKey]*response)}
}

// resource returns r marshalled, building it once per snapshot and key.
//
// Resources are not validated here, per push: generators build them from
// a validated model, and their tests check every resource they generate
// with go-control-plane's validation (and Istio's validators in the
// interop tests). What every resource of a kind shares is validated where
// it is built once (see envoygen's shapes).
func (st *pushState) resource(typeURL string, r resource.Resource) (*builtResource, error) {
	st.mu.Lock()
	b, ok := st.built[r.Key]
	if !ok {
		b = &builtResource{}
		st.built[r.Key] = b
	}
	st.mu.Unlock()
	b.once.Do(func() {
		raw, err := r.Marshal()
		if err != nil {
			b.err = err
			return
		}
		sum := sha256.Sum256(raw)
		b.hash = hex.EncodeToString(sum[:8])
		b.any = &anypb.Any{TypeUrl: typeURL, Value: raw}
		b.delta = &discovery.Resource{Name: r.Name, Version: b.hash, Resource: b.any}
	})
	return b, b.err
}

// maxSharedBytes bounds, roughly, the memory of the responses one push
// state keeps: proxies choose what they ask for, so past it responses are
// built for the one proxy only.
const maxSharedBytes = 64 << 20

// sharedKey identifies what a response is generated from within one push
// state: the type, the names asked for and the proxy fields generation
// reads.
type sharedKey struct {
	typeURL  string
	proxy    string // proxyKey
	names    string // namesKey
	wildcard bool
}

// response is the resources of one type for every proxy that asks the same
// thing of one push state, with their state-of-the-world version. Proxies
// share it read-only; each sends its own DiscoveryResponse around it.
type response struct {
	once      sync.Once
	gen       []generated
	resources []*anypb.Any
	versions  map[string]string // name → hash of each of gen
	version   string
	size      int

	heldOnce sync.Once
	held     *heldBase

	deltaOnce sync.Once
	delta     []*discovery.Resource // gen, as incremental responses carry it; read-only

	canon *response // the push state's response of equal content; set with gen
}

// deltaResources is r's resources as incremental responses carry them,
// one slice for every response that sends all of r.
func (r *response) deltaResources() []*discovery.Resource {
	r.deltaOnce.Do(func() {
		r.delta = make([]*discovery.Resource, len(r.gen))
		for i, g := range r.gen {
			r.delta[i] = g.resource()
		}
	})
	return r.delta
}

// heldBase is what a client sent a response holds of it: the names and
// versions, without the resources, which a client's holdings must not
// keep alive.
type heldBase struct {
	names    []string // in order
	versions map[string]string
}

// heldBase returns r's names and versions, once for every client sent r,
// and one for every response of the same content however many scopes
// gave it.
func (r *response) heldBase(t *heldBases) *heldBase {
	r.heldOnce.Do(func() {
		r.held = t.intern(r.version, &heldBase{names: slices.Collect(r.names), versions: r.versions})
	})
	return r.held
}

// heldBases interns what clients hold of responses: while a client holds
// one, a response of equal content gives the same. Sidecars of different
// scopes mostly hold equal clusters, endpoints and routes.
type heldBases struct {
	mu   sync.Mutex
	byID map[string]weak.Pointer[heldBase] // by response version
}

// intern returns the held base of version equal to h, h if none.
// Versions are hashes a client's choice of names feeds, so a base is
// shared only when its content is equal, not on the version alone.
func (t *heldBases) intern(version string, h *heldBase) *heldBase {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.byID[version].Value(); cur != nil {
		if slices.Equal(cur.names, h.names) && maps.Equal(cur.versions, h.versions) {
			return cur
		}
		return h
	}
	if t.byID == nil {
		t.byID = map[string]weak.Pointer[heldBase]{}
	}
	t.byID[version] = weak.Make(h)
	runtime.AddCleanup(h, t.forget, version)
	return h
}

// forget drops the entry of version once its base is collected, unless
// another took its place.
func (t *heldBases) forget(version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.byID[version]; ok && wp.Value() == nil {
		delete(t.byID, version)
	}
}

// response returns the resources of key for a proxy generating with gen,
// generating them once per push state and key however many proxies ask.
func (st *pushState) response(s *Server, gen generation.Func, key sharedKey, names []string) *response {
	r := st.sharedResponse(key, len(names))
	r.once.Do(func() {
		r.build(s, st, gen, key, names)
		r.canon = st.canonical(key, r)
	})
	return r.canon
}

// canonical returns the response of st equal to r, built for another
// proxy scope, or r when none is: proxies of different scopes mostly ask
// the same of a push, and the push keeps one response of each content.
func (st *pushState) canonical(key sharedKey, r *response) *response {
	st.mu.Lock()
	defer st.mu.Unlock()
	id := key.typeURL + "\x00" + r.version
	c, ok := st.byContent[id]
	switch {
	case !ok:
		if st.byContent == nil {
			st.byContent = map[string]*response{}
		}
		st.byContent[id] = r
		return r
	case !slices.EqualFunc(c.gen, r.gen, func(a, b generated) bool { return a.name == b.name && a.hash == b.hash }):
		return r // versions are hashes a client's choice of names feeds: equal content, not the version alone
	}
	if st.shared[key] == r {
		st.shared[key] = c
	}
	return c
}

// derived returns the resources of key as base, a response to the same
// request in an earlier push state, with those named in changed
// generated again: what key gives when nothing else changed since base.
func (st *pushState) derived(s *Server, gen generation.Func, key sharedKey, base *response, changed []string) *response {
	r := st.sharedResponse(key, len(base.gen))
	r.once.Do(func() {
		r.derive(s, st, gen, key, base, changed)
		r.canon = st.canonical(key, r)
	})
	return r.canon
}

// sharedResponse returns the response of key in st, new and not built
// when no proxy asked for it yet; it is kept for other proxies while st's
// responses stay under maxSharedBytes.
func (st *pushState) sharedResponse(key sharedKey, names int) *response {
	st.mu.Lock()
	r, ok := st.shared[key]
	if !ok {
		r = &response{}
		// The key, and per name a generated resource and a pointer.
		if cost := len(key.names) + len(key.proxy) + 64*names; st.sharedBytes+cost <= maxSharedBytes {
			st.shared[key] = r
			st.sharedBytes += cost
		}
	}
	st.mu.Unlock()
	return r
}

func (r *response) build(s *Server, st *pushState, gen generation.Func, key sharedKey, names []string) {
	r.gen = st.generate(s, gen, key.typeURL, names, key.wildcard)
	r.finish(key)
}

// generate generates and marshals what a proxy asks for of typeURL.
func (st *pushState) generate(s *Server, gen generation.Func, typeURL string, names []string, wildcard bool) []generated {
	var out []generated
	for _, res := range gen(st.snap, typeURL, names, wildcard) {
		b, err := st.resource(typeURL, res)
		if err != nil {
			s.log.Error("generating resource; leaving it out", "type", shortType(typeURL), "name", res.Name, "err", err)
			continue
		}
		g := generated{name: res.Name, hash: b.hash, any: b.any}
		if b.delta.GetName() == res.Name {
			g.delta = b.delta
		}
		out = append(out, g)
	}
	return out
}

// derive makes r base with the resources named in changed (sorted)
// generated again; those no longer generated are left out.
func (r *response) derive(s *Server, st *pushState, gen generation.Func, key sharedKey, base *response, changed []string) {
	fresh := st.generate(s, gen, key.typeURL, changed, false)
	r.gen = make([]generated, 0, len(base.gen)+len(fresh))
	i := 0 // next of fresh; both lists are sorted by name
	for _, g := range base.gen {
		for ; i < len(fresh) && fresh[i].name < g.name; i++ {
			r.gen = append(r.gen, fresh[i])
		}
		if _, ok := slices.BinarySearch(changed, g.name); !ok {
			r.gen = append(r.gen, g)
		}
	}
	r.gen = append(r.gen, fresh[i:]...)
	r.finish(key)
}

// finish fills in what follows from r.gen. The version covers the names
// asked for and the content, so a NACKed response is not repeated until
// one of them changes.
func (r *response) finish(key sharedKey) {
	h := sha256.New()
	if key.wildcard {
		h.Write([]byte("*"))
	}
	h.Write([]byte(key.names))
	h.Write([]byte{0})
	r.resources = make([]*anypb.Any, 0, len(r.gen))
	r.versions = make(map[string]string, len(r.gen))
	var buf []byte
	for _, g := range r.gen {
		r.versions[g.name] = g.hash
		buf = appendField(appendField(buf[:0], g.name), g.hash)
		h.Write(buf)
		r.resources = append(r.resources, g.any)
		r.size += len(g.any.Value)
	}
	r.version = hex.EncodeToString(h.Sum(nil)[:8])
}

// names yields the names of r's resources, in order.
func (r *response) names(yield func(string) bool) {
	for _, g := range r.gen {
		if !yield(g.name) {
			return
		}
	}
}

// namesKey is sorted names as one string. Each name is length-prefixed, so
// names a proxy chooses cannot make two lists share a key.
func namesKey(sorted []string) string {
	var b []byte
	for _, n := range sorted {
		b = appendField(b, n)
	}
	return string(b)
}

func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
