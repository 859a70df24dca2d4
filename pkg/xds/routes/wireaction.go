package routes

import (
	"cmp"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	networkingv1 "istio.io/api/networking/v1"
)

// forward writes into w.rule what every route of rule repeats, as
// translator.route and forward build it: the header operations (the
// rule's, then its single destination's) and the route action; and
// sets the head of the decorator's operation. False when rule is left
// to translate.
func (w *wireWriter) forward(rule *networkingv1.HTTPRoute) bool {
	if destinationsNamed(rule) != nil {
		return false
	}
	r := &w.rule
	r.b = r.b[:0]
	dsts := rule.GetRoute()
	var single *networkingv1.HTTPRouteDestination
	var dh *networkingv1.Headers
	if len(dsts) == 1 {
		single = dsts[0]
		dh = single.GetHeaders()
	}
	rh := rule.GetHeaders()
	if !opsWithinBounds(rh) || !opsWithinBounds(dh) {
		return false
	}
	// Route fields 9 to 12: headers added to requests, to responses,
	// removed from responses, from requests.
	setAuth, ok1 := r.headerAdds(9, rh.GetRequest().GetSet(), false)
	addAuth, ok2 := r.headerAdds(9, rh.GetRequest().GetAdd(), true)
	dsetAuth, ok3 := r.headerAdds(9, dh.GetRequest().GetSet(), false)
	daddAuth, ok4 := r.headerAdds(9, dh.GetRequest().GetAdd(), true)
	_, ok5 := r.headerAdds(10, rh.GetResponse().GetSet(), false)
	_, ok6 := r.headerAdds(10, rh.GetResponse().GetAdd(), true)
	_, ok7 := r.headerAdds(10, dh.GetResponse().GetSet(), false)
	_, ok8 := r.headerAdds(10, dh.GetResponse().GetAdd(), true)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 ||
		!r.headerRemoves(11, rh.GetResponse().GetRemove()) || !r.headerRemoves(11, dh.GetResponse().GetRemove()) ||
		!r.headerRemoves(12, rh.GetRequest().GetRemove()) || !r.headerRemoves(12, dh.GetRequest().GetRemove()) {
		return false
	}
	w.headers = len(r.b)
	authority := cmp.Or(setAuth, addAuth)
	if a := rule.GetRewrite().GetAuthority(); a != "" {
		authority = a
	}
	if authority == "" {
		authority = cmp.Or(dsetAuth, daddAuth)
	}

	// RouteAction fields in number order, then its cluster and its host
	// rewrite (oneof members).
	mark := r.open(2)
	if uri := rule.GetRewrite().GetUri(); uri != "" {
		if !headerSafe(uri) {
			return false
		}
		r.strAlways(5, uri)
	}
	timeout, grpcMax := timeoutOf(rule.GetTimeout())
	r.duration(8, timeout)
	if !w.retries(rule) {
		return false
	}
	r.duration(23, grpcMax)
	if m := rule.GetMirror(); m != nil {
		if num, den, ok := mirrorShare(rule.GetMirrorPercentage(), rule.GetMirrorPercent()); ok && !w.mirror(m, num, den) {
			return false
		}
	}
	for _, m := range rule.GetMirrors() {
		if m.GetDestination() == nil {
			continue
		}
		if num, den, ok := mirrorShare(m.GetPercentage(), nil); ok && !w.mirror(m.GetDestination(), num, den) {
			return false
		}
	}
	if single != nil {
		host, subset, port, ok := w.cluster(1, single.GetDestination())
		// A cluster name operation cannot read back is translate's.
		if !ok || port == 0 || port > 65535 || strings.Contains(host, "|") || strings.Contains(subset, "|") ||
			w.t.hashFor(single.GetDestination()).GetHashKey() != nil {
			return false
		}
		w.op, w.opPort = host, port
	} else if !w.weighted(dsts) {
		return false
	}
	if authority != "" {
		if !headerSafe(authority) {
			return false
		}
		r.strAlways(6, authority)
	}
	r.closeAt(mark)
	return r.err == nil
}

// weighted writes the weighted clusters of dsts, as forward builds them.
func (w *wireWriter) weighted(dsts []*networkingv1.HTTPRouteDestination) bool {
	r := &w.rule
	mark := r.open(3)
	n := 0
	for _, d := range dsts {
		if d.GetWeight() == 0 {
			continue
		}
		cmark := r.open(1)
		if _, _, _, ok := w.cluster(1, d.GetDestination()); !ok {
			return false
		}
		wmark := r.open(2)
		r.varint(1, uint64(uint32(d.GetWeight())))
		r.closeAt(wmark)
		if h := d.GetHeaders(); h != nil {
			if !opsWithinBounds(h) {
				return false
			}
			setAuth, ok1 := r.headerAdds(4, h.GetRequest().GetSet(), false)
			addAuth, ok2 := r.headerAdds(4, h.GetRequest().GetAdd(), true)
			_, ok3 := r.headerAdds(5, h.GetResponse().GetSet(), false)
			_, ok4 := r.headerAdds(5, h.GetResponse().GetAdd(), true)
			if !ok1 || !ok2 || !ok3 || !ok4 || !r.headerRemoves(6, h.GetResponse().GetRemove()) || !r.headerRemoves(9, h.GetRequest().GetRemove()) {
				return false
			}
			if a := cmp.Or(setAuth, addAuth); a != "" {
				if !headerSafe(a) {
					return false
				}
				r.strAlways(11, a)
			}
		}
		if w.t.hashFor(d.GetDestination()).GetHashKey() != nil {
			return false
		}
		r.closeAt(cmark)
		n++
	}
	if n == 0 {
		return false // no cluster: refused, translate's
	}
	r.closeAt(mark)
	w.op, w.opPort = w.t.vs.Name, w.t.scope.Port
	return true
}

// cluster writes field num, the name of d's cluster (translator.cluster's),
// and returns its parts; false when one is not valid UTF-8.
func (w *wireWriter) cluster(num protowire.Number, d *networkingv1.Destination) (host, subset string, port uint32, ok bool) {
	host, port = w.t.clusterOf(d)
	subset = d.GetSubset()
	if !utf8.ValidString(host) || !utf8.ValidString(subset) {
		return "", "", 0, false
	}
	var digits [10]byte
	ps := strconv.AppendUint(digits[:0], uint64(port), 10)
	const prefix = "outbound|"
	r := &w.rule
	r.tag(num, protowire.BytesType)
	r.b = protowire.AppendVarint(r.b, uint64(len(prefix)+len(ps)+2+len(subset)+len(host)))
	r.b = append(append(append(append(append(append(r.b, prefix...), ps...), '|'), subset...), '|'), host...)
	return host, subset, port, true
}

// mirror writes mirrorPolicy's policy for d, num/den of the requests.
func (w *wireWriter) mirror(d *networkingv1.Destination, num uint32, den typev3.FractionalPercent_DenominatorType) bool {
	r := &w.rule
	mark := r.open(30)
	if _, _, _, ok := w.cluster(1, d); !ok {
		return false
	}
	fmark := r.open(3)
	vmark := r.open(1)
	r.varint(1, uint64(num))
	r.varint(2, uint64(den))
	r.closeAt(vmark)
	r.closeAt(fmark)
	r.tag(4, protowire.BytesType) // trace_sampled: false
	r.b = append(r.b, 0)
	r.varintAlways(6, 1) // disable_shadow_host_suffix_append
	r.closeAt(mark)
	return true
}

// retries writes the retry policy of rule (its own, else the mesh's
// default), as retryPolicy makes it; false for a back-off, which
// checkAction validates.
func (w *wireWriter) retries(rule *networkingv1.HTTPRoute) bool {
	r := &w.rule
	in := rule.GetRetries()
	def := in == nil
	if def {
		in = w.t.o.DefaultRetry
	}
	switch {
	case in == nil:
		r.tag(9, protowire.BytesType)
		r.b = protowire.AppendBytes(r.b, defaultRetryWire)
		return true
	case in.GetBackoff() != nil:
		return false
	case def && w.defRetry != nil:
		r.b = append(r.b, w.defRetry...)
		return true
	}
	start := len(r.b)
	if in.GetRetryRemoteLocalities().GetValue() {
		if p := retryPolicy(in, false); p != nil {
			r.message(9, p, func() bool { return r.retryPolicy(p) })
		}
	} else {
		r.retryPolicyOf(in)
	}
	if def {
		w.defRetry = slices.Clone(r.b[start:len(r.b):len(r.b)])
		if w.defRetry == nil {
			w.defRetry = []byte{}
		}
	}
	return true
}

// retryPolicyOf writes the field retryPolicy(in, false) makes, as
// encoder.retryPolicy writes it, for an in without retryRemoteLocalities
// (a priority, left to retryPolicy) or a back-off (refused earlier).
func (e *encoder) retryPolicyOf(in *networkingv1.HTTPRetry) {
	if in.GetAttempts() <= 0 {
		return
	}
	mark := e.open(9)
	// retry_on: Envoy's conditions of in's retryOn, and
	// "retriable-status-codes" after them when it names status codes
	// (a condition naming it already, unless; the name holds no comma,
	// so is in the joined conditions only if in one of them).
	on, codes, named := in.GetRetryOn(), 0, false
	size := 0
	if on == "" {
		size = len(istioRetryOn)
	} else {
		for part := range retryParts(on) {
			if isStatusCode(part) {
				codes++
				continue
			}
			if size > 0 {
				size++
			}
			size += len(part)
			named = named || strings.Contains(part, "retriable-status-codes")
		}
		if codes > 0 && !named {
			size += len(",retriable-status-codes")
		}
	}
	if size > 0 {
		e.tag(1, protowire.BytesType)
		e.b = protowire.AppendVarint(e.b, uint64(size))
		if on == "" {
			e.b = append(e.b, istioRetryOn...)
		} else {
			first := true
			for part := range retryParts(on) {
				if isStatusCode(part) {
					continue
				}
				if !first {
					e.b = append(e.b, ',')
				}
				first = false
				e.b = append(e.b, part...)
			}
			if codes > 0 && !named {
				e.b = append(e.b, ",retriable-status-codes"...)
			}
		}
		if !utf8.Valid(e.b[len(e.b)-size:]) {
			e.fail(errUTF8)
		}
	}
	nmark := e.open(2)
	e.varint(1, uint64(uint32(in.GetAttempts())))
	e.closeAt(nmark)
	e.duration(3, in.GetPerTryTimeout())
	if p := in.GetRetryIgnorePreviousHosts(); p == nil || p.GetValue() {
		e.tag(5, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, previousHostsWire)
	}
	e.varintAlways(6, 5) // host_selection_retry_max_attempts
	if codes > 0 {
		n := 0
		for part := range retryParts(on) {
			if isStatusCode(part) {
				c, _ := strconv.Atoi(part)
				n += protowire.SizeVarint(uint64(c))
			}
		}
		e.tag(7, protowire.BytesType)
		e.b = protowire.AppendVarint(e.b, uint64(n))
		for part := range retryParts(on) {
			if isStatusCode(part) {
				c, _ := strconv.Atoi(part)
				e.b = protowire.AppendVarint(e.b, uint64(c))
			}
		}
	}
	e.closeAt(mark)
}

// retryParts are the trimmed, non-empty parts of a retryOn, as
// parseRetryOn reads them.
func retryParts(on string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for part := range strings.SplitSeq(on, ",") {
			if part = strings.TrimSpace(part); part != "" && !yield(part) {
				return
			}
		}
	}
}

// isStatusCode reports whether parseRetryOn takes part as an HTTP status
// code.
func isStatusCode(part string) bool {
	// What Atoi reads: a sign, then up to 18 digits (Atoi would allocate
	// the error it returns for the rest).
	digits := strings.TrimLeft(part, "+-")
	if len(part)-len(digits) > 1 || digits == "" || len(digits) > 18 || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	code, err := strconv.Atoi(part)
	return err == nil && http.StatusText(code) != ""
}

// istioRetryOn is the retry_on of Istio's default retry policy, and
// previousHostsWire the wire form of its host predicate.
var (
	istioRetryOn      = istioDefaultRetry(false).RetryOn
	previousHostsWire = mustMarshal(previousHosts())
)

// opsWithinBounds reports whether h holds at most MaxHeaderOps
// operations (headerOps refuses more).
func opsWithinBounds(h *networkingv1.Headers) bool {
	req, resp := h.GetRequest(), h.GetResponse()
	return len(req.GetSet())+len(req.GetAdd())+len(req.GetRemove())+len(resp.GetSet())+len(resp.GetAdd())+len(resp.GetRemove()) <= MaxHeaderOps
}

// headerAdds writes the header options headerValues makes of hs as
// fields num, and returns the authority hs sets; false when
// checkHeaderOption would refuse one.
func (e *encoder) headerAdds(num protowire.Number, hs map[string]string, appendValue bool) (string, bool) {
	authority := ""
	var one [1]string
	for _, k := range sortedKeys(hs, &one) {
		v := hs[k]
		if strings.EqualFold(k, ":authority") || strings.EqualFold(k, "host") {
			authority = v
		}
		if internalHeader(k) {
			continue
		}
		if k == "" || len(k) > 16384 || !headerSafe(k) || len(v) > 16384 || !headerSafe(v) {
			return "", false
		}
		mark := e.open(num)
		hmark := e.open(1)
		e.str(1, k)
		e.str(2, v)
		e.closeAt(hmark)
		if !appendValue {
			e.varintAlways(3, uint64(corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD))
		}
		e.closeAt(mark)
	}
	return authority, true
}

// headerRemoves writes the names dropInternal keeps of keys as fields
// num; false when checkHeaderOps would refuse one.
func (e *encoder) headerRemoves(num protowire.Number, keys []string) bool {
	for _, k := range keys {
		if internalHeader(k) {
			continue
		}
		if k == "" || !headerSafe(k) {
			return false
		}
		e.strAlways(num, k)
	}
	return true
}
