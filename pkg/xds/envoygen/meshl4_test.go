package envoygen

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// tlsHosts are two TLS hosts: one with an address, one without.
const tlsHosts = `
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: tls, namespace: app}
spec:
  hosts: [tls.example.com]
  addresses: [240.240.2.1]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pay, namespace: app}
spec:
  hosts: [pay.example.com, secure.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
`

func vsYAML(name, created, spec string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: app, creationTimestamp: \"" + created + "\"}\nspec:\n" + spec
}

// chainSummary is each chain of l as "<server names>|<prefixes> -> <clusters>",
// then the default's.
func chainSummary(t *testing.T, l *listener.Listener) []string {
	t.Helper()
	var out []string
	for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
		if fc == nil {
			continue
		}
		var prefixes []string
		for _, p := range fc.GetFilterChainMatch().GetPrefixRanges() {
			prefixes = append(prefixes, p.GetAddressPrefix())
		}
		var dst []string
		for _, f := range fc.GetFilters() {
			if f.GetName() != tcpProxyFilterName {
				continue
			}
			tp := &tcpproxy.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatal(err)
			}
			if tp.GetCluster() != "" {
				dst = append(dst, tp.GetCluster())
			}
			for _, w := range tp.GetWeightedClusters().GetClusters() {
				dst = append(dst, w.GetName()+"="+strconv.FormatUint(uint64(w.GetWeight()), 10))
			}
		}
		out = append(out, strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")+"|"+strings.Join(prefixes, ",")+" -> "+strings.Join(dst, " "))
	}
	return out
}

// TestMeshL4RoutesOnSidecarListeners: tls and tcp rules of VirtualServices
// bound to "mesh" become the outbound listeners' chains; what would give
// Envoy two chains it cannot tell apart is left out (and found by
// MeshL4Problems), the rest served, every listener valid for Envoy
// (generate validates each resource).
func TestMeshL4RoutesOnSidecarListeners(t *testing.T) {
	for name, tc := range map[string]struct {
		vss      string
		listener string
		want     []string
		problems []string // VirtualService names with a problem
	}{
		"tcp weights to two services": {
			vss: vsYAML("w", "2026-01-01T00:00:00Z", `  hosts: [echo]
  tcp:
  - route: [{destination: {host: echo, port: {number: 9090}}, weight: 90}, {destination: {host: other.web.svc.cluster.local}, weight: 10}]
`),
			listener: "10.96.0.10_9090",
			want:     []string{"| -> outbound|9090||echo.app.svc.cluster.local=90 outbound|80||other.web.svc.cluster.local=10"},
		},
		"tcp subnets before the service's own chain": {
			vss: vsYAML("s", "2026-01-01T00:00:00Z", `  hosts: [echo]
  tcp:
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: other.web.svc.cluster.local}}]
`),
			listener: "10.96.0.10_9090",
			want:     []string{"|10.96.0.0 -> outbound|80||other.web.svc.cluster.local", "| -> outbound|9090||echo.app.svc.cluster.local"},
		},
		"a later VirtualService's subnet already chosen is left out": {
			vss: vsYAML("first", "2026-01-01T00:00:00Z", `  hosts: [echo]
  tcp:
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: other.web.svc.cluster.local}}]
`) + vsYAML("second", "2026-01-01T00:01:00Z", `  hosts: [echo]
  tcp:
  - match: [{destinationSubnets: [10.1.0.0/16, 10.96.0.0/16]}]
    route: [{destination: {host: echo, port: {number: 7070}}}]
`),
			listener: "10.96.0.10_9090",
			want:     []string{"|10.96.0.0 -> outbound|80||other.web.svc.cluster.local", "| -> outbound|9090||echo.app.svc.cluster.local"},
			problems: []string{"second"},
		},
		"tls: overlapping server names of two VirtualServices, the later left out": {
			vss: tlsHosts + vsYAML("first", "2026-01-01T00:00:00Z", `  hosts: [tls.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: pay.example.com}}]
`) + vsYAML("second", "2026-01-01T00:01:00Z", `  hosts: [tls.example.com, b.example.com]
  tls:
  - match: [{sniHosts: [b.example.com, tls.example.com]}]
    route: [{destination: {host: secure.example.com}}]
  - match: [{sniHosts: [b.example.com]}]
    route: [{destination: {host: secure.example.com}}]
`),
			listener: "240.240.2.1_443",
			want:     []string{"tls.example.com| -> outbound|443||pay.example.com", "b.example.com| -> outbound|443||secure.example.com", "| -> PassthroughCluster"},
			problems: []string{"second"},
		},
		"tls on hosts without addresses: one chain per name, routed names replaced": {
			vss: tlsHosts + vsYAML("pay", "2026-01-01T00:00:00Z", `  hosts: [pay.example.com]
  tls:
  - match: [{sniHosts: [pay.example.com]}]
    route: [{destination: {host: tls.example.com}}]
`),
			listener: "0.0.0.0_443",
			want:     []string{"pay.example.com| -> outbound|443||tls.example.com", "secure.example.com| -> outbound|443||secure.example.com", "| -> PassthroughCluster"},
		},
		"a VirtualService of another host choosing a name already routed on the shared listener": {
			vss: tlsHosts + vsYAML("pay", "2026-01-01T00:00:00Z", `  hosts: [pay.example.com, secure.example.com]
  tls:
  - match: [{sniHosts: [pay.example.com, secure.example.com]}]
    route: [{destination: {host: tls.example.com}}]
`) + vsYAML("secure", "2026-01-01T00:01:00Z", `  hosts: [secure.example.com]
  tls:
  - match: [{sniHosts: [secure.example.com]}]
    route: [{destination: {host: pay.example.com}}]
`),
			listener: "0.0.0.0_443",
			want:     []string{"pay.example.com,secure.example.com| -> outbound|443||tls.example.com", "| -> PassthroughCluster"},
			problems: []string{"secure"},
		},
		"a VirtualService whose server name another host's rule (past the webhook) already chose": {
			vss: tlsHosts + vsYAML("wide", "2026-01-01T00:01:00Z", `  hosts: [pay.example.com]
  tls:
  - match: [{sniHosts: [pay.example.com, secure.example.com]}]
    route: [{destination: {host: tls.example.com}}]
`) + vsYAML("secure", "2026-01-01T00:00:00Z", `  hosts: [secure.example.com]
  tls:
  - match: [{sniHosts: [secure.example.com]}]
    route: [{destination: {host: pay.example.com}}]
`),
			listener: "0.0.0.0_443",
			want:     []string{"pay.example.com,secure.example.com| -> outbound|443||tls.example.com", "| -> PassthroughCluster"},
			problems: []string{"secure"},
		},
		"a tls rule naming an entry's name again is left out of the shared listener": {
			vss: tlsHosts + vsYAML("pay", "2026-01-01T00:00:00Z", `  hosts: [pay.example.com, secure.example.com]
  tls:
  - match: [{sniHosts: [pay.example.com]}]
    route: [{destination: {host: tls.example.com}}]
  - match: [{sniHosts: [secure.example.com]}]
    route: [{destination: {host: tls.example.com}}]
`),
			listener: "0.0.0.0_443",
			// pay.example.com's rules give both names; secure.example.com's
			// rules give them again: the first chains stay, once.
			want: []string{"pay.example.com| -> outbound|443||tls.example.com", "secure.example.com| -> outbound|443||tls.example.com", "| -> PassthroughCluster"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, manifests+tc.vss)
			g := &Generator{TrustDomain: td}
			c := generate(t, g, snap, sleepInApp)
			l := c.listeners[tc.listener]
			if l == nil {
				t.Fatalf("no listener %s", tc.listener)
			}
			if got := chainSummary(t, l); !slices.Equal(got, tc.want) {
				t.Errorf("chains\n got %q\nwant %q", got, tc.want)
			}
			for _, l := range c.listeners {
				if o := envoyOverlaps(l); o != "" {
					t.Errorf("listener %s: Envoy would refuse it: %s", l.GetName(), o)
				}
			}
			var got []string
			for _, p := range g.MeshL4Problems(snap) {
				got = append(got, p.Name)
				if !strings.Contains(p.Reason, "Envoy refuses two chains") && !strings.Contains(p.Reason, "is already chosen for") {
					t.Errorf("problem %s: not the clash", p)
				}
			}
			if !slices.Equal(got, tc.problems) {
				t.Errorf("problems of %q, want of %q", got, tc.problems)
			}
		})
	}
}

// TestMeshL4ServiceNames: a service that tcp rules route to names the
// listeners of the services those rules are on, whose chains take its
// port when it has one.
func TestMeshL4ServiceNames(t *testing.T) {
	snap := modeltest.Load(t, manifests+vsYAML("to-other", "2026-01-01T00:00:00Z", `  hosts: [echo]
  tcp:
  - route: [{destination: {host: other.web.svc.cluster.local}}]
`))
	names := map[string]bool{}
	ServiceNames(snap, "other.web.svc.cluster.local", func(typeURL, name string) {
		if typeURL == resource.ListenerType {
			names[name] = true
		}
	})
	for _, want := range []string{"10.96.0.11_80", "10.96.0.10_9090", "10.96.0.10_5000"} {
		if !names[want] {
			t.Errorf("listener %s not named (%v)", want, names)
		}
	}
	if !routes.HasL4(snap) {
		t.Error("HasL4 false")
	}
}

// envoyOverlaps names two filter chains of l that Envoy would find for one
// connection (it refuses such a listener): their matches, expanded by
// server name and prefix range, share a combination. "" when none.
func envoyOverlaps(l *listener.Listener) string {
	seen := map[string]int{}
	for i, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		names := append([]string{}, m.GetServerNames()...)
		if len(names) == 0 {
			names = []string{""}
		}
		prefixes := []string{""}
		if len(m.GetPrefixRanges()) > 0 {
			prefixes = nil
			for _, p := range m.GetPrefixRanges() {
				prefixes = append(prefixes, p.GetAddressPrefix()+"/"+strconv.FormatUint(uint64(p.GetPrefixLen().GetValue()), 10))
			}
		}
		for _, n := range names {
			for _, p := range prefixes {
				k := strings.Join([]string{strconv.FormatUint(uint64(m.GetDestinationPort().GetValue()), 10), p, n, m.GetTransportProtocol(), strings.Join(m.GetApplicationProtocols(), ",")}, "|")
				if j, ok := seen[k]; ok {
					return "chains " + strconv.Itoa(j) + " and " + strconv.Itoa(i) + " both match " + k
				}
				seen[k] = i
			}
		}
	}
	return ""
}

// TestMeshVirtualServiceForEveryHostLeftOut: a VirtualService bound to the
// mesh with the host "*" (Istio's webhook refuses it; one that reached the
// model anyway) would take every service's routes: sidecars leave it out
// whole, and it is a problem reported; the other VirtualServices apply.
func TestMeshVirtualServiceForEveryHostLeftOut(t *testing.T) {
	snap := modeltest.Load(t, manifests+vsYAML("everything", "2026-01-01T00:00:00Z", `  hosts: ["*"]
  http: [{route: [{destination: {host: other.web.svc.cluster.local}}]}]
  tcp: [{route: [{destination: {host: other.web.svc.cluster.local}}]}]
`)+vsYAML("echo", "2026-01-01T00:01:00Z", `  hosts: [echo]
  tcp: [{match: [{port: 5000}], route: [{destination: {host: other.web.svc.cluster.local}}]}]
`))
	g := &Generator{TrustDomain: td}
	c := generate(t, g, snap, sleepInApp)
	if got := chainSummary(t, c.listeners["10.96.0.10_9090"]); !slices.Equal(got, []string{"| -> outbound|9090||echo.app.svc.cluster.local"}) {
		t.Errorf("10.96.0.10_9090: %q, want the service's own chain", got)
	}
	if got := chainSummary(t, c.listeners["10.96.0.10_5000"]); len(got) != 2 || got[1] != "| -> outbound|80||other.web.svc.cluster.local" {
		t.Errorf("10.96.0.10_5000: %q, want echo's tcp route as the default beside the sniffed HTTP chain", got)
	}
	for _, vh := range c.routes["80"].GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if r.GetRoute().GetCluster() == "outbound|80||other.web.svc.cluster.local" && vh.GetName() != "other.web.svc.cluster.local:80" {
				t.Errorf("virtual host %s routes to other: the VirtualService for every host applied", vh.GetName())
			}
		}
	}
	var reasons []string
	for _, p := range g.Mesh.Routes.MeshProblems(snap) {
		if p.Name == "everything" {
			reasons = append(reasons, p.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "wildcard host *") {
		t.Errorf("problems of everything: %q", reasons)
	}
}

// TestMeshL4RoutesFollowTheSidecar: the tcp rules of a VirtualService the
// proxy's Sidecar does not import are not on its listeners, as its http
// rules are not.
func TestMeshL4RoutesFollowTheSidecar(t *testing.T) {
	vs := `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: from-web, namespace: web}
spec:
  hosts: [echo.app.svc.cluster.local]
  tcp:
  - route: [{destination: {host: other.web.svc.cluster.local}}]
`
	for name, tc := range map[string]struct {
		sidecar string
		want    []string
	}{
		"no Sidecar: the rule applies": {
			want: []string{"| -> outbound|80||other.web.svc.cluster.local"},
		},
		"a Sidecar importing web's: the rule applies": {
			sidecar: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\", \"web/*\"]}]\n"),
			want:    []string{"| -> outbound|80||other.web.svc.cluster.local"},
		},
		"a Sidecar importing its own namespace's only: the service's own cluster": {
			sidecar: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"),
			want:    []string{"| -> outbound|9090||echo.app.svc.cluster.local"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, manifests+vs+tc.sidecar)
			c := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp)
			l := c.listeners["10.96.0.10_9090"]
			if l == nil {
				t.Fatal("no listener 10.96.0.10_9090")
			}
			if got := chainSummary(t, l); !slices.Equal(got, tc.want) {
				t.Errorf("chains\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
