package routes

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// The routes of a VirtualService written straight to wire form: what
// translate builds for a scope and MarshalRoutes then encodes, byte for
// byte, without the route messages in between (a gateway with many
// VirtualServices spent most of its push allocating them). Written here
// is what VirtualServices commonly hold: matches on the uri, headers,
// withoutHeaders, query parameters, method, authority and scheme;
// destinations with weights and header operations; uri prefix and
// authority rewrites; header operations, timeouts, retries, mirrors. A
// VirtualService with anything else (a redirect, a direct response,
// fault or CORS, a JWT-claim match, a consistent hash from a
// DestinationRule, a regex rewrite, a retry back-off), or with a value
// translate would refuse or MarshalRoutes would not encode, is left to
// translate, whose result and error it then gets. The checks below are
// checkRoute's, made on the VirtualService's values before they are
// written. wireroute_test.go holds the two paths to the same bytes on
// random VirtualServices.

// wireTranslate writes the routes translate builds for vs in scope, as
// MarshalRoutes encodes them, each with whether it matches every request
// (isCatchAll); ok false leaves vs to translate (deps as they were).
// The routes share one buffer of their size.
func (o Options) wireTranslate(snap *model.Snapshot, vs *model.VirtualService, scope Scope, rs *regexes, deps *reads) (built []builtRoute, ok bool) {
	if checkBounds(vs.Spec) != "" {
		return nil, false
	}
	var nports, nrules int
	if deps != nil {
		nports, nrules = len(deps.ports), len(deps.rules)
	}
	// Written into buffers kept for the next VirtualService, then
	// copied into one of the right size.
	w := wireWriters.Get().(*wireWriter)
	defer w.release()
	w.t = translator{o: o, snap: snap, vs: vs, scope: scope, rs: rs, deps: deps}
	if !w.routes() || w.e.err != nil || w.rule.err != nil {
		if deps != nil {
			deps.ports, deps.rules = deps.ports[:nports], deps.rules[:nrules]
		}
		return nil, false
	}
	buf := make([]byte, len(w.e.b))
	copy(buf, w.e.b)
	built = make([]builtRoute, len(w.ends))
	start := 0
	for i, end := range w.ends {
		built[i] = builtRoute{raw: buf[start:end:end], catchAll: w.catchAll[i]}
		start = end
	}
	return built, true
}

// wireWriters are the writers wireTranslate uses, with their buffers.
var wireWriters = sync.Pool{New: func() any {
	return &wireWriter{e: encoder{b: make([]byte, 0, 4096)}, rule: encoder{b: make([]byte, 0, 1024)}}
}}

// release returns w to wireWriters, its buffers emptied (and dropped
// when a large VirtualService grew them past what is worth keeping).
func (w *wireWriter) release() {
	const keep = 1 << 16
	if cap(w.e.b) > keep || cap(w.rule.b) > keep {
		return
	}
	*w = wireWriter{e: encoder{b: w.e.b[:0]}, rule: encoder{b: w.rule.b[:0]}, ends: w.ends[:0], catchAll: w.catchAll[:0]}
	wireWriters.Put(w)
}

// wireWriter writes the routes of one VirtualService in one scope.
type wireWriter struct {
	t        translator
	e        encoder // the routes, one after the other
	ends     []int   // where each route ends in e.b
	catchAll []bool
	// The routes' metadata field is e.b[metaAt:metaAt+meta] once
	// written.
	metaAt, meta int
	// rule holds the parts of the rule being written that each of its
	// routes repeats: its header operations, then its action.
	rule    encoder
	headers int // end of the header operations in rule.b
	op      string
	opPort  uint32
	// defRetry is the default retry policy's field, once written.
	defRetry []byte
}

// routes writes the routes in build's order; false when one is left to
// translate, or there are none (ErrNoRoutes, translate's).
func (w *wireWriter) routes() bool {
	for _, rule := range w.t.vs.Spec.GetHttp() {
		if !wirable(rule) {
			return false
		}
		if len(rule.GetMatch()) == 0 {
			return w.forward(rule) && w.route(rule, nil)
		}
		prepared := false
		for _, m := range rule.GetMatch() {
			if !w.t.applies(m) {
				continue
			}
			if !prepared {
				if !w.forward(rule) {
					return false
				}
				prepared = true
			}
			if !w.route(rule, m) || len(w.ends) > MaxRoutes {
				return false
			}
			if w.catchAll[len(w.catchAll)-1] {
				return true
			}
		}
	}
	return len(w.ends) > 0
}

// wirable reports whether rule holds only what this writer writes.
func wirable(rule *networkingv1.HTTPRoute) bool {
	return rule.GetDelegate() == nil && rule.GetRedirect() == nil && rule.GetDirectResponse() == nil &&
		rule.GetFault() == nil && rule.GetCorsPolicy() == nil && rule.GetRewrite().GetUriRegexRewrite() == nil
}

// route writes the route of rule's match m (nil: every request), whose
// header operations and action forward wrote.
func (w *wireWriter) route(rule *networkingv1.HTTPRoute, m *networkingv1.HTTPMatchRequest) bool {
	e := &w.e
	// Route fields in number order (match 1, metadata 4, decorator 5,
	// header operations 9 to 12, name 14, stat prefix 19), then the
	// action (a oneof member).
	mark := e.open(1)
	path, suffix, all, ok := w.match(m)
	if !ok {
		return false
	}
	e.closeAt(mark)
	if w.meta == 0 {
		start := len(e.b)
		w.metadata()
		w.metaAt, w.meta = start, len(e.b)-start
	} else {
		e.b = append(e.b, e.b[w.metaAt:w.metaAt+w.meta]...)
	}
	// The decorator's operation: "<op>:<port><path>".
	var digits [10]byte
	port := strconv.AppendUint(digits[:0], uint64(w.opPort), 10)
	if !utf8.ValidString(w.op) {
		return false
	}
	dmark := e.open(5)
	e.tag(1, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(len(w.op)+1+len(port)+len(path)+len(suffix)))
	e.b = append(append(append(append(append(e.b, w.op...), ':'), port...), path...), suffix...)
	e.closeAt(dmark)
	e.b = append(e.b, w.rule.b[:w.headers]...)
	name, mname := rule.GetName(), m.GetName()
	if !utf8.ValidString(name) || !utf8.ValidString(mname) {
		return false
	}
	if n := len(name) + len(mname); n > 0 {
		e.tag(14, protowire.BytesType)
		if mname != "" {
			e.b = protowire.AppendVarint(e.b, uint64(n+1))
			e.b = append(append(append(e.b, name...), '.'), mname...)
		} else {
			e.b = protowire.AppendString(e.b, name)
		}
	}
	e.str(19, m.GetStatPrefix())
	e.b = append(e.b, w.rule.b[w.headers:]...)
	w.ends = append(w.ends, len(e.b))
	w.catchAll = append(w.catchAll, all)
	return e.err == nil
}

// metadata writes the routes' metadata field, as translator.metadata
// makes it and encoder.metadata writes it.
func (w *wireWriter) metadata() {
	e := &w.e
	const head, mid = "/apis/networking.istio.io/v1/namespaces/", "/virtual-service/"
	ns, name := w.t.vs.Namespace, w.t.vs.Name
	if !utf8.ValidString(ns) || !utf8.ValidString(name) {
		e.fail(errUTF8)
		return
	}
	m := e.open(4)
	f := e.open(1)
	e.strAlways(1, "istio")
	s := e.open(2)
	c := e.open(1)
	e.strAlways(1, "config")
	v := e.open(2)
	e.tag(3, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(len(head)+len(ns)+len(mid)+len(name)))
	e.b = append(append(append(append(e.b, head...), ns...), mid...), name...)
	e.closeAt(v)
	e.closeAt(c)
	e.closeAt(s)
	e.closeAt(f)
	e.closeAt(m)
}

// match writes the content of routeMatch's match of m, and returns its
// path as the decorator's operation ends with it (path and suffix), and
// whether it matches every request.
func (w *wireWriter) match(m *networkingv1.HTTPMatchRequest) (path, suffix string, all, ok bool) {
	e := &w.e
	switch {
	case m == nil: // every path, case_sensitive left unset
		e.strAlways(1, "/")
		return "/", "*", true, true
	case m.GetIgnoreUriCase():
		e.tag(4, protowire.BytesType)
		e.b = append(e.b, 0)
	default:
		e.b = append(e.b, caseSensitiveWire...)
	}
	headers := false
	var oneH, oneW [1]string
	hn := sortedKeys(m.GetHeaders(), &oneH)
	wn := sortedKeys(m.GetWithoutHeaders(), &oneW)
	for i, j := 0, 0; i < len(hn) || j < len(wn); {
		// Merged by name, headers before withoutHeaders of the same
		// name, as routeMatch's stable sort leaves them.
		var name string
		var sm *networkingv1.StringMatch
		invert := false
		if j >= len(wn) || (i < len(hn) && hn[i] <= wn[j]) {
			name, sm = hn[i], m.GetHeaders()[hn[i]]
			i++
		} else {
			name, sm, invert = wn[j], m.GetWithoutHeaders()[wn[j]], true
			j++
		}
		if _, claim := claimPath(name); claim || !w.headerMatcher(name, sm, invert) {
			return "", "", false, false
		}
		headers = true
	}
	for _, p := range [...]struct {
		name string
		sm   *networkingv1.StringMatch
	}{{":method", m.GetMethod()}, {":authority", m.GetAuthority()}, {":scheme", m.GetScheme()}} {
		if p.sm == nil {
			continue
		}
		if !w.headerMatcher(p.name, p.sm, false) {
			return "", "", false, false
		}
		headers = true
	}
	var oneQ [1]string
	qn := sortedKeys(m.GetQueryParams(), &oneQ)
	for _, name := range qn {
		if name == "" || len(name) > 1024 {
			return "", "", false, false
		}
		sm := m.GetQueryParams()[name]
		mark := e.open(7)
		e.str(1, name)
		if presentMatch(sm) {
			e.varintAlways(6, 1)
		} else if !w.stringMatcher(5, sm) {
			return "", "", false, false
		}
		e.closeAt(mark)
	}
	path, suffix = "/", "*"
	regex := false
	switch p := m.GetUri().GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		path, suffix = p.Exact, ""
		e.strAlways(2, path)
	case *networkingv1.StringMatch_Regex:
		if p.Regex == "" || w.t.rs.check(p.Regex) != nil {
			return "", "", false, false
		}
		path, suffix, regex = p.Regex, "", true
		mark := e.open(10)
		e.str(2, path)
		e.closeAt(mark)
	case *networkingv1.StringMatch_Prefix:
		path = p.Prefix
		e.strAlways(1, path)
	default:
		e.strAlways(1, path)
	}
	all = !headers && len(qn) == 0 && ((!regex && suffix != "" && path == "/") || (regex && path == ".*"))
	return path, suffix, all, true
}

// caseSensitiveWire is a RouteMatch's case_sensitive set to true.
var caseSensitiveWire = []byte{4<<3 | byte(protowire.BytesType), 2, 1 << 3, 1}

// headerMatcher writes headerMatch's matcher of name (inverted, as for
// withoutHeaders, when invert); false when checkHeaderMatcher would
// refuse it.
func (w *wireWriter) headerMatcher(name string, sm *networkingv1.StringMatch, invert bool) bool {
	if name == "" || !headerSafe(name) {
		return false
	}
	e := &w.e
	mark := e.open(6)
	e.str(1, name)
	present := presentMatch(sm)
	if invert {
		e.varintAlways(8, 1)
		if !present {
			e.varintAlways(14, 1)
		}
	}
	if present {
		e.varintAlways(7, 1)
	} else if !w.stringMatcher(13, sm) {
		return false
	}
	e.closeAt(mark)
	return true
}

// stringMatcher writes stringMatcher's matcher of sm as field num; false
// when checkStringMatcher would refuse it.
func (w *wireWriter) stringMatcher(num protowire.Number, sm *networkingv1.StringMatch) bool {
	e := &w.e
	switch p := sm.GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		mark := e.open(num)
		e.strAlways(1, p.Exact)
		e.closeAt(mark)
	case *networkingv1.StringMatch_Prefix:
		if p.Prefix == "" {
			return false
		}
		mark := e.open(num)
		e.strAlways(2, p.Prefix)
		e.closeAt(mark)
	case *networkingv1.StringMatch_Regex:
		if p.Regex == "" || w.t.rs.check(p.Regex) != nil {
			return false
		}
		mark := e.open(num)
		rmark := e.open(5)
		e.str(2, p.Regex)
		e.closeAt(rmark)
		e.closeAt(mark)
	default:
		return false
	}
	return true
}
