package routes

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Mesh is the name that binds a VirtualService to sidecars.
const Mesh = "mesh"

// GatewayName is the name "ns/name" VirtualServices bind gw by.
func GatewayName(gw *model.Gateway) string { return gw.Namespace + "/" + gw.Name }

// resolveGateway is a VirtualService's gateway reference in namespace ns
// as "ns/name": "name" and "./name" are in ns; a legacy
// "name.ns.svc.domain" names ns/name; "mesh" stays.
func resolveGateway(ref, ns string) string {
	if ref == Mesh {
		return ref
	}
	if gwNs, name, ok := strings.Cut(ref, "/"); ok {
		if gwNs == "." {
			return ns + "/" + name
		}
		return ref
	}
	name, rest, ok := strings.Cut(ref, ".")
	if !ok {
		return ns + "/" + ref
	}
	gwNs, _, _ := strings.Cut(rest, ".")
	return gwNs + "/" + name
}

// gatewaysOf are vs's bindings resolved: "mesh" alone when it names none.
func gatewaysOf(vs *model.VirtualService) []string {
	refs := vs.Spec.GetGateways()
	if len(refs) == 0 {
		return []string{Mesh}
	}
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if g := resolveGateway(r, vs.Namespace); !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// bindsTo reports whether gatewaysOf(vs) holds gateway, without making
// the list: boundTo asks it of every VirtualService.
func bindsTo(vs *model.VirtualService, gateway string) bool {
	refs := vs.Spec.GetGateways()
	if len(refs) == 0 {
		return gateway == Mesh
	}
	for _, ref := range refs {
		if refersTo(ref, vs.Namespace, gateway) {
			return true
		}
	}
	return false
}

// refersTo reports whether resolveGateway(ref, ns) is gateway.
func refersTo(ref, ns, gateway string) bool {
	if ref == Mesh {
		return gateway == Mesh
	}
	if gwNs, name, ok := strings.Cut(ref, "/"); ok {
		if gwNs == "." {
			return joined(gateway, ns, name)
		}
		return ref == gateway
	}
	name, rest, ok := strings.Cut(ref, ".")
	if !ok {
		return joined(gateway, ns, ref)
	}
	gwNs, _, _ := strings.Cut(rest, ".")
	return joined(gateway, gwNs, name)
}

// joined reports whether s is ns + "/" + name.
func joined(s, ns, name string) bool {
	return len(s) == len(ns)+1+len(name) && s[:len(ns)] == ns && s[len(ns)] == '/' && s[len(ns)+1:] == name
}

// visibility is how far a VirtualService's exportTo lets it be seen from
// namespace ns: 0 not at all, 1 privately (its own namespace), 2 exported
// to ns by name, 3 public. Istio lists the bound services of a gateway in
// that order (PushContext.VirtualServicesForGateway).
func visibility(vs *model.VirtualService, ns string, defaults []string) int {
	exportTo := vs.Spec.GetExportTo()
	if len(exportTo) == 0 {
		exportTo = defaults
	}
	if len(exportTo) == 0 || slices.Contains(exportTo, "*") {
		return 3
	}
	if slices.Contains(exportTo, "~") {
		return 0
	}
	for _, e := range exportTo {
		if e == "." {
			e = vs.Namespace
		}
		if e == ns {
			if e == vs.Namespace {
				return 1
			}
			return 2
		}
	}
	return 0
}

// boundTo returns the VirtualServices bound to gateway ("ns/name") that
// the gateway pod's namespace may see, in Istio's order: private ones,
// then those exported to the namespace by name, then public ones; within
// each, oldest first, then by name and namespace.
func (o Options) boundTo(snap *model.Snapshot, gateway, proxyNamespace string) []*model.VirtualService {
	return o.boundToWhere(snap, gateway, proxyNamespace, nil)
}

// boundToWhere is boundTo of the VirtualServices keep accepts (nil: all),
// asked of those bound and visible alone.
func (o Options) boundToWhere(snap *model.Snapshot, gateway, proxyNamespace string, keep func(*model.VirtualService) bool) []*model.VirtualService {
	var byVis [4][]*model.VirtualService
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec == nil || !bindsTo(vs, gateway) {
			continue
		}
		v := visibility(vs, proxyNamespace, o.DefaultExportTo)
		if v == 0 || (keep != nil && !keep(vs)) {
			continue
		}
		byVis[v] = append(byVis[v], vs)
	}
	var out []*model.VirtualService
	for _, l := range byVis[1:] {
		slices.SortStableFunc(l, func(a, b *model.VirtualService) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
		})
		out = append(out, l...)
	}
	return out
}

// fqdn resolves a short host name (one without a dot) in namespace ns:
// "reviews" is "reviews.<ns>.svc.<domain>". "*", IP addresses and names
// with a dot are taken as written.
func fqdn(snap *model.Snapshot, h, ns string) string {
	if h == "" || h == "*" || strings.Contains(h, ".") {
		return h
	}
	// Without a dot, only an IPv6 address is an address.
	if strings.Contains(h, ":") {
		if _, err := netip.ParseAddr(h); err == nil {
			return h
		}
	}
	return h + "." + ns + ".svc." + snap.Options.Domain
}

// serverHostsFor are the hosts of a gateway server a VirtualService of
// namespace vsNs may claim: "ns/host" only when ns is vsNs ("./host" is
// the Gateway's namespace), "*/host" and "host" always, namespace removed.
func serverHostsFor(hosts []string, gwNs, vsNs string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if ns, name, ok := strings.Cut(h, "/"); ok {
			if ns == "." {
				ns = gwNs
			}
			if ns != vsNs && ns != "*" {
				continue
			}
			h = name
		}
		out = append(out, h)
	}
	return out
}

func wildcarded(h string) bool { return strings.HasPrefix(h, "*") }

// subsetOf reports whether every name h matches is matched by o
// (Istio's host.Name.SubsetOf).
func subsetOf(h, o string) bool {
	switch {
	case wildcarded(h) && wildcarded(o):
		return len(h) >= len(o) && strings.HasSuffix(h[1:], o[1:])
	case wildcarded(h):
		return false
	case wildcarded(o):
		return strings.HasSuffix(h, o[1:])
	}
	return h == o
}

// matches reports whether h and o have a name in common (Istio's
// host.Name.Matches).
func matches(h, o string) bool {
	switch {
	case wildcarded(h) && wildcarded(o):
		if len(h) < len(o) {
			return strings.HasSuffix(o[1:], h[1:])
		}
		return strings.HasSuffix(h[1:], o[1:])
	case wildcarded(h):
		return strings.HasSuffix(o, h[1:])
	case wildcarded(o):
		return strings.HasSuffix(h, o[1:])
	}
	return h == o
}

// intersect is the narrower of each pair of server and VirtualService
// hosts that overlap, in server host order, without repeats.
func intersect(server, vs []string) []string {
	var out []string
	var seen map[string]bool // past a few hosts, which a scan finds
	for _, s := range server {
		for _, v := range vs {
			var h string
			switch {
			case subsetOf(s, v):
				h = s
			case subsetOf(v, s):
				h = v
			default:
				continue
			}
			switch {
			case seen != nil:
				if seen[h] {
					continue
				}
				seen[h] = true
			case slices.Contains(out, h):
				continue
			case len(out) == 8:
				seen = make(map[string]bool, 2*len(out))
				for _, o := range out {
					seen[o] = true
				}
				seen[h] = true
			}
			out = append(out, h)
		}
	}
	return out
}
