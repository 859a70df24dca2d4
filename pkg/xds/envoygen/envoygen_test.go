package envoygen

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const manifests = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  clusterIP: 10.96.0.10
  selector: {app: echo}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: tcp-db, port: 9090, targetPort: 9091}
  - {name: grpc, port: 7070, targetPort: 7070}
  - {name: peer, port: 5000, targetPort: 5001}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: web}
spec:
  clusterIP: 10.96.0.11
  selector: {app: other}
  ports: [{name: http-web, port: 80, targetPort: 8000}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: app}
spec:
  address: 10.0.0.5
  labels: {app: echo, version: v1, security.istio.io/tlsMode: istio}
  serviceAccount: echo
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-legacy, namespace: app}
spec:
  address: 10.0.0.6
  labels: {app: echo, version: v2}
  serviceAccount: legacy
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: other-1, namespace: web}
spec:
  address: 10.0.1.5
  labels: {app: other, security.istio.io/tlsMode: istio}
  serviceAccount: other
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: STRICT}
  portLevelMtls:
    9091: {mode: PERMISSIVE}
    7070: {mode: DISABLE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-sleep, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/app/sa/sleep"]}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: other, namespace: web}
spec:
  host: other.web.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - {name: plain, labels: {app: other}, trafficPolicy: {tls: {mode: DISABLE}}}
`

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

// config is every resource of one proxy, built and validated.
type config struct {
	listeners map[string]*listener.Listener
	clusters  map[string]*cluster.Cluster
	routes    map[string]*route.RouteConfiguration
	endpoints map[string]*endpoint.ClusterLoadAssignment
}

func generate(t *testing.T, g *Generator, snap *model.Snapshot, p *Proxy) config {
	t.Helper()
	c := config{map[string]*listener.Listener{}, map[string]*cluster.Cluster{}, map[string]*route.RouteConfiguration{}, map[string]*endpoint.ClusterLoadAssignment{}}
	build := func(typeURL string) []proto.Message {
		var out []proto.Message
		seen := map[string]bool{}
		for _, r := range g.Generate(snap, p, typeURL, nil, true) {
			if seen[r.Name] {
				t.Fatalf("%s: %s generated twice", typeURL, r.Name)
			}
			seen[r.Name] = true
			m, err := r.Message(typeURL)
			if err != nil {
				t.Fatalf("%s %s: %v", typeURL, r.Name, err)
			}
			if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Fatalf("%s %s: %v", typeURL, r.Name, err)
			}
			out = append(out, m)
		}
		return out
	}
	for _, m := range build(resource.ListenerType) {
		c.listeners[m.(*listener.Listener).Name] = m.(*listener.Listener)
	}
	for _, m := range build(resource.ClusterType) {
		c.clusters[m.(*cluster.Cluster).Name] = m.(*cluster.Cluster)
	}
	for _, m := range build(resource.RouteType) {
		c.routes[m.(*route.RouteConfiguration).Name] = m.(*route.RouteConfiguration)
	}
	for _, m := range build(resource.EndpointType) {
		c.endpoints[m.(*endpoint.ClusterLoadAssignment).ClusterName] = m.(*endpoint.ClusterLoadAssignment)
	}
	return c
}

func TestEveryReferenceIsAnswered(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}})
	for name, cl := range c.clusters {
		if cl.GetType() == cluster.Cluster_EDS && c.endpoints[cl.GetEdsClusterConfig().GetServiceName()] == nil {
			t.Errorf("EDS cluster %s has no load assignment: Envoy would warm it forever", name)
		}
	}
	for name, l := range c.listeners {
		for _, fc := range append(slices.Clone(l.FilterChains), l.DefaultFilterChain) {
			for _, f := range fc.GetFilters() {
				switch f.Name {
				case hcmFilterName:
					m := &hcm.HttpConnectionManager{}
					if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
						t.Fatal(err)
					}
					if rds := m.GetRds(); rds != nil && c.routes[rds.RouteConfigName] == nil {
						t.Errorf("listener %s names route %q, which is not generated", name, rds.RouteConfigName)
					}
				case tcpProxyFilterName:
					m := &tcpproxy.TcpProxy{}
					if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
						t.Fatal(err)
					}
					if c.clusters[m.GetCluster()] == nil {
						t.Errorf("listener %s sends to cluster %q, which is not generated", name, m.GetCluster())
					}
				}
			}
		}
	}
	for _, want := range []string{"virtualOutbound", "virtualInbound", "0.0.0.0_80", "0.0.0.0_7070", "10.96.0.10_9090"} {
		if c.listeners[want] == nil {
			t.Errorf("no listener %s; have %v", want, keys(c.listeners))
		}
	}
	if vh := c.routes["80"].GetVirtualHosts(); len(vh) != 3 || vh[len(vh)-1].GetDomains()[0] != "*" {
		t.Errorf("route 80: want a host per service and the catch-all last, got %v", vh)
	}
}

func TestAutoMTLSFollowsTheEndpoints(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}})

	cl := c.clusters["outbound|80||echo.app.svc.cluster.local"]
	if cl.TransportSocket != nil || len(cl.TransportSocketMatches) != 2 {
		t.Fatalf("auto-mTLS cluster: want two socket matches and no socket, got %v", cl)
	}
	m := cl.TransportSocketMatches
	if m[0].GetMatch().GetFields()["tlsMode"].GetStringValue() != "istio" || len(m[1].GetMatch().GetFields()) != 0 {
		t.Errorf("want tlsMode=istio first and the catch-all last, got %v", m)
	}
	up := &tlsv3.UpstreamTlsContext{}
	if err := m[0].TransportSocket.GetTypedConfig().UnmarshalTo(up); err != nil {
		t.Fatal(err)
	}
	var sans []string
	for _, s := range up.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
		if s.SanType != tlsv3.SubjectAltNameMatcher_URI {
			t.Errorf("SAN matcher of type %v", s.SanType)
		}
		sans = append(sans, s.GetMatcher().GetExact())
	}
	if want := []string{"spiffe://cluster.local/ns/app/sa/echo", "spiffe://cluster.local/ns/app/sa/legacy"}; !slices.Equal(sans, want) {
		t.Errorf("SANs %v, want %v", sans, want)
	}
	ctx := up.GetCommonTlsContext()
	if ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName() != "default" ||
		ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "ROOTCA" ||
		up.Sni != "outbound_.80_._.echo.app.svc.cluster.local" || !slices.Contains(ctx.AlpnProtocols, "istio") {
		t.Errorf("upstream TLS context: %v", up)
	}

	// Only the endpoint with a sidecar is marked for mTLS; on port 7070
	// its PeerAuthentication disables mTLS, so none is.
	marked := func(cla *endpoint.ClusterLoadAssignment) (out []string) {
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				if e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"] != nil {
					out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
		}
		return out
	}
	if got := marked(c.endpoints["outbound|80||echo.app.svc.cluster.local"]); !slices.Equal(got, []string{"10.0.0.5"}) {
		t.Errorf("port 80: endpoints marked for mTLS %v, want [10.0.0.5]", got)
	}
	if got := marked(c.endpoints["outbound|7070||echo.app.svc.cluster.local"]); len(got) != 0 {
		t.Errorf("port 7070 (DISABLE): endpoints marked for mTLS %v, want none", got)
	}

	// The DestinationRule's ISTIO_MUTUAL is a plain socket; its subset's
	// DISABLE none.
	if cl := c.clusters["outbound|80||other.web.svc.cluster.local"]; cl.TransportSocket == nil || len(cl.TransportSocketMatches) != 0 {
		t.Errorf("ISTIO_MUTUAL cluster: %v", cl)
	}
	if cl := c.clusters["outbound|80|plain|other.web.svc.cluster.local"]; cl == nil || cl.TransportSocket != nil || len(cl.TransportSocketMatches) != 0 {
		t.Errorf("DISABLE subset cluster: %v", cl)
	}
}

func TestInboundChainsFollowTheMTLSMode(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}})
	in := c.listeners["virtualInbound"]
	type chain struct {
		transport string
		mtls      bool
		rbac      bool
	}
	byPort := map[uint32][]chain{}
	for _, fc := range in.FilterChains {
		if fc.Name == "virtualInbound-blackhole" {
			continue
		}
		port := fc.GetFilterChainMatch().GetDestinationPort().GetValue()
		ch := chain{transport: fc.GetFilterChainMatch().GetTransportProtocol(), mtls: fc.TransportSocket != nil}
		for _, f := range fc.Filters {
			if strings.Contains(f.Name, "rbac") {
				ch.rbac = true
			}
			if f.Name == hcmFilterName {
				m := &hcm.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					t.Fatal(err)
				}
				for _, hf := range m.HttpFilters {
					if strings.Contains(hf.Name, "rbac") {
						ch.rbac = true
					}
				}
				if m.ForwardClientCertDetails != hcm.HttpConnectionManager_APPEND_FORWARD {
					t.Errorf("port %d: XFCC %v", port, m.ForwardClientCertDetails)
				}
			}
		}
		if !ch.rbac {
			t.Errorf("chain %s (port %d) has no RBAC, but an ALLOW policy selects the workload", fc.Name, port)
		}
		if ch.mtls {
			down := &tlsv3.DownstreamTlsContext{}
			if err := fc.TransportSocket.GetTypedConfig().UnmarshalTo(down); err != nil {
				t.Fatal(err)
			}
			if !down.GetRequireClientCertificate().GetValue() ||
				down.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "ROOTCA" {
				t.Errorf("chain %s: mTLS without a required client certificate checked against ROOTCA", fc.Name)
			}
		}
		byPort[port] = append(byPort[port], ch)
	}
	want := map[uint32][]chain{
		8080: {{"tls", true, true}},                                                    // STRICT HTTP
		9091: {{"tls", true, true}, {"tls", false, true}, {"raw_buffer", false, true}}, // PERMISSIVE TCP
		7070: {{"raw_buffer", false, true}},                                            // DISABLE HTTP
	}
	for port, w := range want {
		if !slices.Equal(byPort[port], w) {
			t.Errorf("port %d: chains %v, want %v", port, byPort[port], w)
		}
	}
	// STRICT at workload level: the passthrough takes only mTLS.
	for _, ch := range byPort[0] {
		if !ch.mtls {
			t.Errorf("passthrough chain without mTLS under STRICT: %v", ch)
		}
	}
	if c.clusters["inbound|8080||"].GetUpstreamBindConfig().GetSourceAddress().GetAddress() != "127.0.0.6" {
		t.Error("inbound cluster not bound to 127.0.0.6")
	}
}

func TestRegistryOnlyBlocksUnknownDestinations(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{RegistryOnly: true}}, snap, &Proxy{Namespace: "app", IPs: []string{"10.0.0.9"}})
	out := c.listeners["virtualOutbound"]
	tcp := &tcpproxy.TcpProxy{}
	if err := out.FilterChains[len(out.FilterChains)-1].Filters[0].GetTypedConfig().UnmarshalTo(tcp); err != nil {
		t.Fatal(err)
	}
	if tcp.GetCluster() != blackholeCluster {
		t.Errorf("catch-all goes to %s under REGISTRY_ONLY", tcp.GetCluster())
	}
	vhs := c.routes["80"].GetVirtualHosts()
	if last := vhs[len(vhs)-1]; last.GetRoutes()[0].GetDirectResponse().GetStatus() != 502 {
		t.Errorf("catch-all virtual host under REGISTRY_ONLY: %v", last)
	}
}

func TestProxiesOfOneScopeShareResourceKeys(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	g := &Generator{TrustDomain: td}
	a := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}}
	b := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.7"}}
	for _, typeURL := range []string{resource.ListenerType, resource.ClusterType, resource.RouteType, resource.EndpointType} {
		ka, kb := resourceKeys(g.Generate(snap, a, typeURL, nil, true)), resourceKeys(g.Generate(snap, b, typeURL, nil, true))
		if !slices.Equal(ka, kb) {
			t.Errorf("%s: two replicas of one workload do not share resources", typeURL)
		}
	}
	other := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}}
	if slices.Equal(resourceKeys(g.Generate(snap, a, resource.ListenerType, nil, true)), resourceKeys(g.Generate(snap, other, resource.ListenerType, nil, true))) {
		t.Error("workloads under different policies share virtualInbound")
	}
}

func resourceKeys(rs []resource.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestTrustDomainAliasesWidenPrincipals: with the mesh's trust domain
// aliases, the policy's "cluster.local" principal admits the identity under
// every domain of the bundle, on every inbound chain that carries RBAC.
func TestTrustDomainAliasesWidenPrincipals(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	for name, tc := range map[string]struct {
		aliases []string
		want    bool
	}{
		"with an alias, the alias's identity is admitted":  {[]string{"old.td"}, true},
		"without aliases, only the mesh's own is admitted": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			g := &Generator{TrustDomain: td, Mesh: Mesh{TrustDomainAliases: tc.aliases}}
			c := generate(t, g, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}})
			rbacChains := 0
			for _, fc := range c.listeners["virtualInbound"].GetFilterChains() {
				text := prototext.Format(fc)
				if !strings.Contains(text, "spiffe://cluster.local/ns/app/sa/sleep") {
					continue
				}
				rbacChains++
				if got := strings.Contains(text, "spiffe://old.td/ns/app/sa/sleep"); got != tc.want {
					t.Errorf("chain %s admits the alias's identity: %v, want %v", fc.GetName(), got, tc.want)
				}
			}
			if rbacChains == 0 {
				t.Fatal("no inbound chain names the policy's principal")
			}
		})
	}
}

// A Service exported to its own namespace gives a sidecar of another
// namespace no cluster, load assignment, listener or route of it, asked
// for by wildcard or by name; its own namespace's sidecars keep them.
func TestServiceExportToHidesIt(t *testing.T) {
	snap := modeltest.Load(t, manifests+`
---
apiVersion: v1
kind: Service
metadata:
  name: private
  namespace: web
  annotations: {networking.istio.io/exportTo: "."}
spec:
  clusterIP: 10.96.0.12
  selector: {app: other}
  ports:
  - {name: http-web, port: 80, targetPort: 8000}
  - {name: http-admin, port: 8081, targetPort: 8001}
  - {name: tcp-db, port: 9092, targetPort: 9002}
`)
	g := &Generator{TrustDomain: td}
	const host = "private.web.svc.cluster.local"
	for _, p := range []*Proxy{{Namespace: "web"}, {Namespace: "app"}} {
		visible := p.Namespace == "web"
		c := generate(t, g, snap, p)
		has := map[string]bool{
			"cluster outbound|80||" + host:         c.clusters["outbound|80||"+host] != nil,
			"cluster outbound|9092||" + host:       c.clusters["outbound|9092||"+host] != nil,
			"load assignment outbound|80||" + host: c.endpoints["outbound|80||"+host] != nil,
			"listener 10.96.0.12_9092":             c.listeners["10.96.0.12_9092"] != nil,
			"listener 0.0.0.0_8081":                c.listeners["0.0.0.0_8081"] != nil,
			"route 8081":                           c.routes["8081"] != nil,
		}
		vh := false
		for _, h := range c.routes["80"].GetVirtualHosts() {
			vh = vh || slices.Contains(h.GetDomains(), host)
		}
		has["virtual host in route 80"] = vh
		for what, got := range has {
			if got != visible {
				t.Errorf("sidecar of %s: %s %t, want %t", p.Namespace, what, got, visible)
			}
		}
		for typeURL, name := range map[string]string{
			resource.ClusterType: "outbound|80||" + host, resource.EndpointType: "outbound|80||" + host,
			resource.ListenerType: "10.96.0.12_9092",
		} {
			if got := len(g.Generate(snap, p, typeURL, []string{name}, false)) == 1; got != visible {
				t.Errorf("sidecar of %s: %s named %s generated %t, want %t", p.Namespace, typeURL, name, got, visible)
			}
		}
	}
	// The service's own workload still serves it.
	server := generate(t, g, snap, &Proxy{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}})
	if server.listeners[virtualInbound] == nil {
		t.Error("no inbound listener")
	}
}

// A DestinationRule exported to its own namespace with tls DISABLE makes
// that namespace's clusters to the service plaintext and leaves another
// namespace's on auto-mTLS.
func TestDestinationRuleExportToOwnNamespace(t *testing.T) {
	snap := modeltest.Load(t, manifests+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec: {host: echo, exportTo: ["."], trafficPolicy: {tls: {mode: DISABLE}}}
`)
	g := &Generator{TrustDomain: td}
	const name = "outbound|80||echo.app.svc.cluster.local"
	own := generate(t, g, snap, &Proxy{Namespace: "app"}).clusters[name]
	other := generate(t, g, snap, &Proxy{Namespace: "web"}).clusters[name]
	if own.GetTransportSocket() != nil || len(own.GetTransportSocketMatches()) != 0 {
		t.Errorf("the rule's own namespace: TLS %v %v, want plaintext", own.GetTransportSocket(), own.GetTransportSocketMatches())
	}
	if len(other.GetTransportSocketMatches()) == 0 {
		t.Error("another namespace: no auto-mTLS")
	}
}
