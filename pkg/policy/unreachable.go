package policy

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// Warnings about routes no request reaches, as Istio's validation warns:
// a route after one without matches, a match equal to an earlier one, and
// a uri prefix match an earlier, shorter prefix match covers.

// maxOverlapChecks bounds the prefix matches compared pairwise; beyond it
// the overlap warnings are not looked for (they never refuse).
const maxOverlapChecks = 512

func warnUnreachable(f *Findings, vs *networking.VirtualService) {
	var prefixes []prefixMatch
	routes := vs.GetHttp()
	l4 := func(field string, n int, matches func(int) []proto.Message) {
		seen := map[string]int{}
		catchAll := -1
		for i := range n {
			ms := matches(i)
			if ms == nil {
				continue
			}
			p := at("spec."+field, i)
			if len(ms) == 0 {
				if catchAll >= 0 {
					f.warnf(p, "not used: only the last rule can have no matches")
				}
				catchAll = i
				continue
			}
			dups := 0
			for j, m := range ms {
				if catchAll >= 0 {
					f.warnf(p, "not used: a rule without matches comes before")
					continue
				}
				k := matchKey(m)
				if prior, ok := seen[k]; ok {
					f.warnf(at(p+".match", j), "not used: the same match is in rule #%d", prior)
					dups++
					continue
				}
				seen[k] = i
				if field == "http" && len(prefixes) < maxOverlapChecks+1 {
					if pm, ok := prefixOf(routes[i], m.(*networking.HTTPMatchRequest), i, j); ok {
						prefixes = append(prefixes, pm)
					}
				}
			}
			if dups == len(ms) {
				f.warnf(p, "not used: every match is in an earlier rule")
			}
		}
	}
	l4("http", len(routes), func(i int) []proto.Message {
		if routes[i] == nil {
			return nil
		}
		return messages(routes[i].GetMatch())
	})
	l4("tcp", len(vs.GetTcp()), func(i int) []proto.Message {
		if vs.GetTcp()[i] == nil {
			return nil
		}
		return messages(vs.GetTcp()[i].GetMatch())
	})
	l4("tls", len(vs.GetTls()), func(i int) []proto.Message {
		if vs.GetTls()[i] == nil {
			return nil
		}
		return messages(vs.GetTls()[i].GetMatch())
	})
	if len(prefixes) > maxOverlapChecks {
		return
	}
	for i, a := range prefixes {
		for _, b := range prefixes[i+1:] {
			if a.prefix != b.prefix && a.covers(b) {
				f.warnf(b.path, "not used: the prefix %s of rule %s comes before and covers %s", quote(a.prefix), a.route, quote(b.prefix))
			}
		}
	}
}

// messages is a list of matches as messages; an empty, non-nil list for
// none.
func messages[M proto.Message](ms []M) []proto.Message {
	out := make([]proto.Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	return out
}

// matchKey is equal for equal matches, an HTTP match's name aside.
func matchKey(m proto.Message) string {
	if hm, ok := m.(*networking.HTTPMatchRequest); ok && hm.GetName() != "" {
		c := proto.Clone(hm).(*networking.HTTPMatchRequest)
		c.Name = ""
		m = c
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "unmarshalable:" + fmt.Sprint(m)
	}
	return string(b)
}

// prefixMatch is what decides whether one uri prefix match covers a later
// one: each value "exact:<v>" or "prefix:<v>".
type prefixMatch struct {
	path, route, prefix string
	port                uint32
	method, authority   string
	headers, query, not map[string]string
}

func prefixOf(r *networking.HTTPRoute, m *networking.HTTPMatchRequest, i, j int) (prefixMatch, bool) {
	if m == nil || m.GetUri().GetPrefix() == "" {
		return prefixMatch{}, false
	}
	route := "#" + strconv.Itoa(i)
	if r.GetName() != "" {
		route = strconv.Quote(r.GetName())
	}
	pm := prefixMatch{
		path: at(at("spec.http", i)+".match", j), route: route, prefix: m.GetUri().GetPrefix(), port: m.GetPort(),
		method: exactOrPrefix(m.GetMethod()), authority: exactOrPrefix(m.GetAuthority()),
		headers: matchValues(m.GetHeaders()), query: matchValues(m.GetQueryParams()), not: matchValues(m.GetWithoutHeaders()),
	}
	if pm.method == "" {
		pm.method = "exact:GET" // as Istio assumes
	}
	return pm, true
}

func exactOrPrefix(s *networking.StringMatch) string {
	switch {
	case s.GetExact() != "":
		return "exact:" + s.GetExact()
	case s.GetPrefix() != "":
		return "prefix:" + s.GetPrefix()
	}
	return ""
}

func matchValues(m map[string]*networking.StringMatch) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = exactOrPrefix(v)
	}
	return out
}

// covers follows Istio's comparison of a match a before a match b.
func (a prefixMatch) covers(b prefixMatch) bool {
	within := func(x, y string) bool { return x == y || strings.HasPrefix(x, y) }
	sameMaps := func(x, y map[string]string) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !within(v, w) {
				return false
			}
		}
		return true
	}
	return strings.HasPrefix(b.prefix, a.prefix) && a.port == b.port && within(a.method, b.method) &&
		within(a.authority, b.authority) && sameMaps(a.headers, b.headers) && sameMaps(a.query, b.query) &&
		sameMaps(a.not, b.not)
}
