package envoygen

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// chainFilters says what a filter chain does: the RDS route of its HTTP
// connection manager ("rds:<name>"), or the cluster of its tcp_proxy
// ("tcp:<cluster>").
func chainTarget(t *testing.T, fc *listener.FilterChain) string {
	t.Helper()
	for _, f := range fc.GetFilters() {
		switch f.Name {
		case hcmFilterName:
			m := &hcm.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			return "rds:" + m.GetRds().GetRouteConfigName()
		case tcpProxyFilterName:
			m := &tcpproxy.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			return "tcp:" + m.GetCluster()
		}
	}
	return "none"
}

func TestUndeclaredOutboundPortIsSniffed(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{RegistryOnly: true}}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}})

	l := c.listeners["10.96.0.10_5000"]
	if l == nil {
		t.Fatalf("no listener 10.96.0.10_5000; have %v", keys(c.listeners))
	}
	if len(l.FilterChains) != 1 {
		t.Fatalf("want one HTTP chain and a default TCP chain, got %d chains", len(l.FilterChains))
	}
	m := l.FilterChains[0].GetFilterChainMatch()
	if m.GetTransportProtocol() != "raw_buffer" || !slices.Equal(m.GetApplicationProtocols(), []string{"http/1.1", "h2c"}) {
		t.Errorf("HTTP chain matches %v, want plaintext HTTP/1.1 and h2c", m)
	}
	const route, cl = "echo.app.svc.cluster.local:5000", "outbound|5000||echo.app.svc.cluster.local"
	if got := chainTarget(t, l.FilterChains[0]); got != "rds:"+route {
		t.Errorf("HTTP chain: %s, want rds:%s", got, route)
	}
	if got := chainTarget(t, l.DefaultFilterChain); got != "tcp:"+cl {
		t.Errorf("default chain: %s, want tcp:%s", got, cl)
	}
	if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].Name != httpInspectorName || lf[0].FilterDisabled != nil {
		t.Errorf("listener filters %v, want the HTTP inspector alone", lf)
	}

	// The route is the service's alone: any Host, no catch-all (not even
	// REGISTRY_ONLY's), as the connection went to the service's VIP.
	rc := c.routes[route]
	if rc == nil {
		t.Fatalf("no route %s; have %v", route, keys(c.routes))
	}
	if vh := rc.GetVirtualHosts(); len(vh) != 1 || !slices.Equal(vh[0].GetDomains(), []string{"*"}) ||
		vh[0].GetName() != route || vh[0].GetRoutes()[0].GetRoute().GetCluster() != cl {
		t.Errorf("route %s: virtual hosts %v", route, vh)
	}
	for _, absent := range []string{"0.0.0.0_5000", "5000"} {
		if c.listeners[absent] != nil || c.routes[absent] != nil {
			t.Errorf("%s generated for a port no service declares HTTP", absent)
		}
	}

	// Sniffed HTTP goes upstream as it came, so h2c stays HTTP/2.
	opts := &httpopts.HttpProtocolOptions{}
	if err := c.clusters[cl].GetTypedExtensionProtocolOptions()[httpOptionsName].UnmarshalTo(opts); err != nil {
		t.Fatalf("cluster %s: %v", cl, err)
	}
	if opts.GetUseDownstreamProtocolConfig() == nil {
		t.Errorf("cluster %s does not use the downstream protocol: %v", cl, opts)
	}
	if _, ok := c.clusters["outbound|9090||echo.app.svc.cluster.local"].GetTypedExtensionProtocolOptions()[httpOptionsName]; ok {
		t.Error("a TCP port's cluster has HTTP protocol options")
	}
}

func TestUndeclaredInboundPortHasHTTPAndTCPChainsWithRBAC(t *testing.T) {
	for name, tc := range map[string]struct {
		manifests string
		chains    []string // transport, ALPNs, HTTP or TCP, RBAC kind
		inspector bool     // the HTTP inspector reads port 5001
	}{
		"STRICT: mTLS only, HTTP by Istio's HTTP ALPNs, TCP otherwise": {
			manifests: manifests,
			chains: []string{
				"tls istio-http/1.0,istio-http/1.1,istio-h2 rds http",
				"tls  tcp network",
			},
		},
		"PERMISSIVE: plaintext HTTP too, found by the HTTP inspector": {
			manifests: strings.Replace(manifests, "7070: {mode: DISABLE}", "7070: {mode: DISABLE}\n    5001: {mode: PERMISSIVE}", 1),
			chains: []string{
				"tls istio-http/1.0,istio-http/1.1,istio-h2 rds http",
				"raw_buffer http/1.1,h2c rds http",
				"tls istio-peer-exchange,istio tcp network",
				"raw_buffer  tcp network",
				"tls  tcp network",
			},
			inspector: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, tc.manifests)
			c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}})
			in := c.listeners["virtualInbound"]
			var got []string
			for _, fc := range in.FilterChains {
				if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != 5001 {
					continue
				}
				m := fc.GetFilterChainMatch()
				kind, _, _ := strings.Cut(chainTarget(t, fc), ":")
				got = append(got, strings.Join([]string{m.GetTransportProtocol(), strings.Join(m.GetApplicationProtocols(), ","), kind, rbacKind(t, fc)}, " "))
			}
			if !slices.Equal(got, tc.chains) {
				t.Errorf("chains of port 5001:\n got %q\nwant %q", got, tc.chains)
			}
			inspects := false
			for _, lf := range in.ListenerFilters {
				if lf.Name == httpInspectorName {
					inspects = !portDisabled(lf.FilterDisabled, 5001)
				}
			}
			if inspects != tc.inspector {
				t.Errorf("HTTP inspector on port 5001: %v, want %v", inspects, tc.inspector)
			}
		})
	}
}

// rbacKind is the RBAC filter a chain has: "http", "network" or "none".
func rbacKind(t *testing.T, fc *listener.FilterChain) string {
	t.Helper()
	for _, f := range fc.Filters {
		if f.Name == "envoy.filters.network.rbac" {
			return "network"
		}
		if f.Name != hcmFilterName {
			continue
		}
		m := &hcm.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		for _, hf := range m.HttpFilters {
			if hf.Name == "envoy.filters.http.rbac" {
				return "http"
			}
		}
	}
	return "none"
}

// portDisabled evaluates a listener filter's filter_disabled predicate of
// the kinds envoygen writes (port ranges, or, not) for a destination port.
func portDisabled(p *listener.ListenerFilterChainMatchPredicate, port int32) bool {
	switch r := p.GetRule().(type) {
	case nil:
		return false
	case *listener.ListenerFilterChainMatchPredicate_DestinationPortRange:
		return r.DestinationPortRange.GetStart() <= port && port < r.DestinationPortRange.GetEnd()
	case *listener.ListenerFilterChainMatchPredicate_NotMatch:
		return !portDisabled(r.NotMatch, port)
	case *listener.ListenerFilterChainMatchPredicate_OrMatch:
		for _, q := range r.OrMatch.GetRules() {
			if portDisabled(q, port) {
				return true
			}
		}
		return false
	}
	panic("predicate of an unexpected kind")
}

// Two services on one VIP and port (Kubernetes prevents it; a file model
// does not): the listener is shared as Istio merges it, the first TCP
// chain and the first sniffed HTTP chain.
const sharedVIP = `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: app}
spec:
  clusterIP: 10.96.0.50
  ports: [{name: tcp-x, port: 6000}]
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: app}
spec:
  clusterIP: 10.96.0.50
  ports: [{name: x, port: 6000}]
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: app}
spec:
  clusterIP: 10.96.0.51
  ports: [{name: web, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: d, namespace: app}
spec:
  clusterIP: 10.96.0.52
  ports: [{name: http, port: 80}]
`

func TestServicesSharingAnAddressShareItsListener(t *testing.T) {
	snap := modeltest.Load(t, sharedVIP)
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", IPs: []string{"10.0.0.9"}})
	l := c.listeners["10.96.0.50_6000"]
	if l == nil || len(l.FilterChains) != 1 {
		t.Fatalf("listener 10.96.0.50_6000: %v", l)
	}
	if got := chainTarget(t, l.FilterChains[0]); got != "rds:b.app.svc.cluster.local:6000" {
		t.Errorf("HTTP chain %s, want b's sniffed route", got)
	}
	if got := chainTarget(t, l.DefaultFilterChain); got != "tcp:outbound|6000||a.app.svc.cluster.local" {
		t.Errorf("TCP chain %s, want a's cluster", got)
	}
	// A port declared HTTP by one service and undeclared by another: the
	// shared route of the port has both (Istio's IsHTTPOrSniffed), and the
	// undeclared one also has its own listener and route.
	var hosts []string
	for _, vh := range c.routes["80"].GetVirtualHosts() {
		hosts = append(hosts, vh.GetName())
	}
	if want := []string{"c.app.svc.cluster.local:80", "d.app.svc.cluster.local:80", "allow_any"}; !slices.Equal(hosts, want) {
		t.Errorf("route 80: virtual hosts %v, want %v", hosts, want)
	}
	if c.listeners["10.96.0.51_80"] == nil || c.routes["c.app.svc.cluster.local:80"] == nil || c.listeners["10.96.0.52_80"] != nil {
		t.Errorf("listeners %v, routes %v", keys(c.listeners), keys(c.routes))
	}
	if c.clusters["outbound|6000||a.app.svc.cluster.local"].GetType() != cluster.Cluster_EDS {
		t.Error("shared VIP: cluster of a is not EDS")
	}
}

const headless = `
apiVersion: v1
kind: Service
metadata: {name: db, namespace: app}
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: tcp-sql, port: 5432}
  - {name: peer, port: 7000}
  - {name: http, port: 8080}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: db-0, namespace: app}
spec:
  address: 10.0.2.1
  labels: {app: db, security.istio.io/tlsMode: istio}
  serviceAccount: db
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: db-1, namespace: app}
spec:
  address: 10.0.2.2
  labels: {app: db, security.istio.io/tlsMode: istio}
  serviceAccount: db
`

func TestHeadlessServiceHasAListenerPerEndpoint(t *testing.T) {
	snap := modeltest.Load(t, headless)
	g := &Generator{TrustDomain: td}
	db0 := &Proxy{Namespace: "app", Labels: map[string]string{"app": "db"}, IPs: []string{"10.0.2.1"}}
	c := generate(t, g, snap, db0)
	// Not to itself; to its peer, TCP and sniffed; HTTP on 0.0.0.0.
	for name, want := range map[string]bool{
		"10.0.2.1_5432": false, "10.0.2.1_7000": false,
		"10.0.2.2_5432": true, "10.0.2.2_7000": true, "0.0.0.0_8080": true, "10.0.2.2_8080": false,
	} {
		if got := c.listeners[name] != nil; got != want {
			t.Errorf("listener %s: present %v, want %v", name, got, want)
		}
	}
	if l := c.listeners["10.0.2.2_7000"]; l != nil && chainTarget(t, l.FilterChains[0]) != "rds:db.app.svc.cluster.local:7000" {
		t.Errorf("10.0.2.2_7000: HTTP chain %s", chainTarget(t, l.FilterChains[0]))
	}
	// ORIGINAL_DST, so the connection goes to the endpoint it was made
	// to; mTLS for all, as every endpoint has a sidecar; no EDS.
	cl := c.clusters["outbound|5432||db.app.svc.cluster.local"]
	if cl.GetType() != cluster.Cluster_ORIGINAL_DST || cl.GetLbPolicy() != cluster.Cluster_CLUSTER_PROVIDED ||
		cl.GetEdsClusterConfig() != nil || cl.GetTransportSocket() == nil || len(cl.GetTransportSocketMatches()) != 0 {
		t.Errorf("headless cluster: %v", cl)
	}
	if c.endpoints["outbound|5432||db.app.svc.cluster.local"] != nil {
		t.Error("a ClusterLoadAssignment for an ORIGINAL_DST cluster")
	}

	// Two replicas differ by the listener each lacks: not one scope.
	db1 := &Proxy{Namespace: "app", Labels: map[string]string{"app": "db"}, IPs: []string{"10.0.2.2"}}
	if g.Scope(snap, db0) == g.Scope(snap, db1) {
		t.Error("two endpoints of a headless service share a scope")
	}
	client := &Proxy{Namespace: "app", IPs: []string{"10.0.0.9"}}
	client2 := &Proxy{Namespace: "app", IPs: []string{"10.0.0.10"}}
	if g.Scope(snap, client) != g.Scope(snap, client2) {
		t.Error("two clients of one scope do not share it")
	}
}

func TestHeadlessClusterIsPlaintextUnlessEveryEndpointHasASidecar(t *testing.T) {
	snap := modeltest.Load(t, strings.Replace(headless, "10.0.2.2\n  labels: {app: db, security.istio.io/tlsMode: istio}", "10.0.2.2\n  labels: {app: db}", 1))
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", IPs: []string{"10.0.0.9"}})
	cl := c.clusters["outbound|5432||db.app.svc.cluster.local"]
	if cl.GetType() != cluster.Cluster_ORIGINAL_DST || cl.GetTransportSocket() != nil || len(cl.GetTransportSocketMatches()) != 0 {
		t.Errorf("headless cluster with an endpoint without a sidecar: %v", cl)
	}
}
