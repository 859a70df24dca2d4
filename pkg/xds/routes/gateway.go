package routes

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// BoundServer is a server of a Gateway.
type BoundServer struct {
	Gateway *model.Gateway
	Server  *networkingv1.Server
}

// GatewayVirtualHosts returns the virtual hosts a gateway server gets on
// its route configuration: one per (lower-cased) host in the
// intersection of srv.Hosts ("ns/host", "./host", "*/host" forms) and the
// hosts of the VirtualServices bound to gw, honouring exportTo toward the
// gateway pod's namespace; names "<host>:<server port>", domains [host];
// with none, Istio's "blackhole:<port>" virtual host (domains ["*"], no
// routes). srv.Tls.HttpsRedirect ⇒ require_tls ALL. Hosts with the same
// routes share one virtual host, as Istio collapses them.
func GatewayVirtualHosts(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, proxyNamespace string) ([]*routev3.VirtualHost, []Problem) {
	return Options{}.RouteVirtualHosts(snap, []BoundServer{{Gateway: gw, Server: srv}}, Proxy{Namespace: proxyNamespace})
}

// vhost is a virtual host being built, with the contributions that make
// its routes: Istio collapses hosts whose routes are the same objects,
// those of the same VirtualServices through the same gateways.
type vhost struct {
	host   string
	port   uint32
	routes []builtRoute
	from   []string // "<gateway>|<vs ns>/<vs name>" in order
	tls    bool     // require_tls ALL
}

// RouteVirtualHosts returns the virtual hosts of one route configuration
// that servers share (all the plaintext HTTP servers of a port, or one
// HTTPS server), built as Istio's buildGatewayHTTPRouteConfig: per server,
// the VirtualServices bound to its gateway add their routes to the virtual
// host of each host they share with it; httpsRedirect adds a redirecting
// virtual host for each server host; catch-all routes go last; identical
// virtual hosts are collapsed; the result is sorted by name.
func (o Options) RouteVirtualHosts(snap *model.Snapshot, servers []BoundServer, proxy Proxy) ([]*routev3.VirtualHost, []Problem) {
	return o.MemoVirtualHosts(nil, snap, servers, proxy)
}

// MemoVirtualHosts is RouteVirtualHosts, with the translations of the
// VirtualServices that delegate nothing taken from and kept in m (nil:
// none kept). What it returns is shared: not to be changed.
func (o Options) MemoVirtualHosts(m *Memo, snap *model.Snapshot, servers []BoundServer, proxy Proxy) ([]*routev3.VirtualHost, []Problem) {
	f := messages
	if m != nil {
		f = messagesAndWire
	}
	hosts, problems := o.virtualHosts(m, snap, servers, proxy, f)
	out := make([]*routev3.VirtualHost, len(hosts))
	for i, h := range hosts {
		vh := &routev3.VirtualHost{Name: h.name, Domains: h.domains, Routes: make([]*routev3.Route, 0, len(h.routes)), IncludeRequestAttemptCount: h.attempts}
		for r := range catchAllLast(h.routes) {
			vh.Routes = append(vh.Routes, r.msg)
		}
		if h.tls {
			vh.RequireTls = routev3.VirtualHost_ALL
		}
		out[i] = vh
	}
	return out, problems
}

// virtualHosts are the virtual hosts of RouteVirtualHosts, their routes
// translated into form f (through m, nil: none kept), catch-all routes
// not yet last.
func (o Options) virtualHosts(m *Memo, snap *model.Snapshot, servers []BoundServer, proxy Proxy, f form) ([]builtHost, []Problem) {
	labels := ""
	if m != nil {
		labels = labelsKey(proxy.Labels)
	}
	var problems []Problem
	var byHost map[string]*vhost
	var order []string
	type key struct{ gw, ns, name string }
	var built map[key][]builtRoute
	failed := map[key]bool{}
	bound := map[string][]*model.VirtualService{}
	var dmap delegates
	rs := &regexes{}
	ds := func() delegates {
		if dmap == nil {
			dmap = delegatesOf(snap)
		}
		return dmap
	}
	for _, bs := range servers {
		srv := bs.Server
		if bs.Gateway == nil || srv == nil {
			continue
		}
		if len(srv.GetHosts()) > MaxHosts {
			problems = append(problems, serverTooBig(bs.Gateway, srv))
			continue
		}
		gwName := GatewayName(bs.Gateway)
		port := srv.GetPort().GetNumber()
		redirect := srv.GetTls().GetHttpsRedirect()
		vss, ok := bound[gwName]
		if !ok {
			vss = o.boundTo(snap, gwName, proxy.Namespace)
			bound[gwName] = vss
		}
		if built == nil {
			// Sized for a VirtualService of one host each.
			built, byHost = make(map[key][]builtRoute, len(vss)), make(map[string]*vhost, len(vss))
		}
		// The server's hosts a namespace's VirtualServices may claim,
		// once per namespace.
		claimable := map[string][]string{}
		var vsHosts []string
		for _, vs := range vss {
			if len(vs.Spec.GetHosts()) > MaxHosts {
				k := key{gwName, vs.Namespace, vs.Name}
				if !failed[k] {
					failed[k] = true
					problems = append(problems, vsProblem(vs, "%d hosts, more than %d", len(vs.Spec.GetHosts()), MaxHosts))
				}
				continue
			}
			vsHosts = vsHosts[:0]
			for _, h := range vs.Spec.GetHosts() {
				vsHosts = append(vsHosts, fqdn(snap, h, vs.Namespace))
			}
			srvHosts, ok := claimable[vs.Namespace]
			if !ok {
				srvHosts = serverHostsFor(srv.GetHosts(), bs.Gateway.Namespace, vs.Namespace)
				claimable[vs.Namespace] = srvHosts
			}
			hosts := intersect(srvHosts, vsHosts)
			if len(hosts) == 0 {
				continue
			}
			k := key{gwName, vs.Namespace, vs.Name}
			if failed[k] {
				continue
			}
			routes, ok := built[k]
			if !ok {
				scope := Scope{Port: port, Gateway: gwName, TLS: srv.GetTls() != nil, Proxy: proxy}
				var e *memoEntry
				if m != nil && memoizable(vs) {
					e = o.memoRoutes(m, snap, vs, scope, labels, rs, f)
				} else {
					expanded, dprobs := o.expand(snap, vs, ds)
					problems = append(problems, dprobs...)
					e = o.buildRoutes(snap, expanded, scope, rs, f, false)
				}
				routes = e.built
				if err := e.err; err != nil {
					failed[k] = true
					if !errors.Is(err, ErrNoRoutes) {
						problems = append(problems, vsProblem(vs, "left out of gateway %s: %v", gwName, err))
					}
					continue
				}
				built[k] = routes
			}
			from := gwName + "|" + vs.Namespace + "/" + vs.Name
			for _, h := range hosts {
				h = lower(h)
				v, ok := byHost[h]
				if !ok {
					if err := validDomain(h, port); err != nil {
						problems = append(problems, vsProblem(vs, "host %q left out: %v", h, err))
						continue
					}
					v = &vhost{host: h, port: port}
					byHost[h] = v
					order = append(order, h)
				} else if len(v.routes)+len(routes) > MaxRoutes {
					problems = append(problems, vsProblem(vs, "left out of host %s: more than %d routes", h, MaxRoutes))
					continue
				}
				v.routes = append(v.routes, routes...)
				v.from = append(v.from, from)
				v.tls = v.tls || redirect
			}
		}
		if !redirect {
			continue
		}
		for _, h := range srv.GetHosts() {
			// A "ns/host" server host redirects requests for host: Istio
			// makes a virtual host whose domain is "ns/host" itself, which
			// no request matches; the redirect is what the server asks.
			if _, name, ok := strings.Cut(h, "/"); ok {
				h = name
			}
			h = lower(h)
			if v, ok := byHost[h]; ok {
				v.tls = true
				continue
			}
			if err := validDomain(h, port); err != nil {
				problems = append(problems, Problem{Kind: "Gateway", Namespace: bs.Gateway.Namespace, Name: bs.Gateway.Name,
					Reason: fmt.Sprintf("host %q left out: %v", h, err)})
				continue
			}
			byHost[h] = &vhost{host: h, port: port, tls: true}
			order = append(order, h)
		}
	}
	if len(byHost) == 0 {
		port := uint32(0)
		if len(servers) > 0 {
			port = servers[0].Server.GetPort().GetNumber()
		}
		return []builtHost{{name: "blackhole:" + strconv.FormatUint(uint64(port), 10), domains: []string{"*"}}}, problems
	}
	return collapse(byHost, order), problems
}

// validDomain says why Envoy would refuse the virtual host of h (named
// "<h>:<port>", domains [h]), or nil: Envoy's rule for a domain, no NUL,
// CR or LF (TestValidDomainAgreesWithEnvoy holds it to ValidateAll).
func validDomain(h string, _ uint32) error {
	if h == "" {
		return errors.New("empty host")
	}
	if !headerSafe(h) {
		return errors.New("a host name holds NUL, CR or LF")
	}
	return nil
}

// collapse makes the virtual hosts, one for each set of hosts with the
// same contributions and redirect, named after the most specific host
// (Istio's host order: exact before wildcard, longer first, then
// alphabetical), sorted by name.
func collapse(byHost map[string]*vhost, hosts []string) []builtHost {
	slices.SortFunc(hosts, moreSpecific)
	type key struct {
		from string
		tls  bool
	}
	first := make(map[key]int, len(hosts))
	out := make([]builtHost, 0, len(hosts))
	for _, h := range hosts {
		v := byHost[h]
		k := key{strings.Join(v.from, "\n"), v.tls}
		if i, ok := first[k]; ok {
			out[i].domains = append(out[i].domains, h)
			continue
		}
		first[k] = len(out)
		out = append(out, builtHost{
			name:     h + ":" + strconv.FormatUint(uint64(v.port), 10),
			domains:  []string{h},
			routes:   v.routes,
			tls:      v.tls,
			attempts: true,
		})
	}
	slices.SortStableFunc(out, func(a, b builtHost) int { return cmp.Compare(a.name, b.name) })
	return out
}

// builtHost is a virtual host RouteVirtualHosts makes: its name and
// domains, its routes (catch-all routes not yet last), whether it
// requires TLS (require_tls ALL) and counts request attempts
// (include_request_attempt_count).
type builtHost struct {
	name     string
	domains  []string
	routes   []builtRoute
	tls      bool
	attempts bool
}

func moreSpecific(a, b string) int {
	aw, bw := wildcarded(a), wildcarded(b)
	switch {
	case aw && !bw:
		return 1
	case !aw && bw:
		return -1
	case len(a) != len(b):
		return cmp.Compare(len(b), len(a))
	}
	return cmp.Compare(a, b)
}

// catchAllLast yields the routes that match every request after the
// others, keeping the order within each (Istio's SortVHostRoutes).
func catchAllLast(routes []builtRoute) iter.Seq[builtRoute] {
	return func(yield func(builtRoute) bool) {
		for _, last := range []bool{false, true} {
			for _, r := range routes {
				if r.catchAll == last && !yield(r) {
					return
				}
			}
		}
	}
}
