package grpcgen

import (
	"slices"

	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

const manifests = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080, targetPort: 9000}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: app}
spec:
  address: 10.0.0.2
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: echo
  locality: us-east1/us-east1-b
  ports: {grpc: 9000}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-2, namespace: app}
spec:
  address: 10.0.0.3
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: echo-canary
`

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

func load(t *testing.T, extra string) *model.Snapshot {
	t.Helper()
	return modeltest.Load(t, manifests+extra)
}

// build generates one resource and checks it passes Envoy's validation.
func build[T proto.Message](t *testing.T, snap *model.Snapshot, p *Proxy, typeURL, name string) T {
	t.Helper()
	g := &Generator{TrustDomain: td}
	rs := g.Generate(snap, p, typeURL, []string{name}, false)
	if len(rs) != 1 {
		t.Fatalf("%s %s: %d resources", typeURL, name, len(rs))
	}
	m, err := rs[0].Message(typeURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m.(T)
}

var client = &Proxy{Namespace: "app", Labels: map[string]string{"app": "client"}}

func TestClientSide(t *testing.T) {
	snap := load(t, "")
	l := build[*listener.Listener](t, snap, client, ListenerType, "echo.app.svc.cluster.local:8080")
	var h hcm.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&h); err != nil {
		t.Fatal(err)
	}
	if got := h.GetRds().GetRouteConfigName(); got != "echo.app.svc.cluster.local:8080" {
		t.Errorf("RDS name %q", got)
	}
	rc := build[*route.RouteConfiguration](t, snap, client, RouteType, "echo.app.svc.cluster.local:8080")
	if got := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != "outbound|8080||echo.app.svc.cluster.local" {
		t.Errorf("route cluster %q", got)
	}
	c := build[*cluster.Cluster](t, snap, client, ClusterType, "outbound|8080||echo.app.svc.cluster.local")
	var up tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatalf("auto-mTLS toward tlsMode=istio endpoints: %v", err)
	}
	common := up.GetCommonTlsContext()
	if common.GetTlsCertificateProviderInstance().GetInstanceName() != "default" ||
		common.GetValidationContext().GetCaCertificateProviderInstance().GetCertificateName() != "ROOTCA" {
		t.Errorf("provider instances: %v", common)
	}
	if common.GetTlsParams() != nil || len(common.GetTlsCertificates()) > 0 || common.GetTlsCertificateSdsSecretConfigs() != nil {
		t.Errorf("fields gRPC rejects: %v", common)
	}
	var sans []string
	for _, m := range common.GetValidationContext().GetMatchSubjectAltNames() {
		sans = append(sans, m.GetExact())
	}
	want := []string{"spiffe://cluster.local/ns/app/sa/echo", "spiffe://cluster.local/ns/app/sa/echo-canary"}
	if len(sans) != 2 || sans[0] != want[0] || sans[1] != want[1] {
		t.Errorf("SANs %v, want %v", sans, want)
	}
	cla := build[*endpoint.ClusterLoadAssignment](t, snap, client, EndpointType, "outbound|8080||echo.app.svc.cluster.local")
	if len(cla.GetEndpoints()) != 2 {
		t.Fatalf("localities: %v", cla.GetEndpoints())
	}
	for _, loc := range cla.GetEndpoints() {
		if loc.GetLoadBalancingWeight().GetValue() == 0 {
			t.Errorf("locality %v without weight", loc.GetLocality())
		}
	}
	// The WorkloadEntry's port for the service port name wins.
	if p := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); p != 9000 {
		t.Errorf("endpoint port %d", p)
	}
}

func TestClusterTLS(t *testing.T) {
	tests := map[string]struct {
		extra string
		mtls  bool
	}{
		"tlsMode=istio endpoints get mTLS": {mtls: true},
		"a DestinationRule DISABLE turns mTLS off": {extra: `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec: {host: echo, trafficPolicy: {tls: {mode: DISABLE}}}`},
		"PeerAuthentication DISABLE at the destination turns auto-mTLS off": {extra: `
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec: {mtls: {mode: DISABLE}}`},
		"a DestinationRule ISTIO_MUTUAL wins over PeerAuthentication DISABLE": {mtls: true, extra: `
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec: {mtls: {mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: istio-system}
spec: {host: echo.app.svc.cluster.local, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := build[*cluster.Cluster](t, load(t, tc.extra), client, ClusterType, "outbound|8080||echo.app.svc.cluster.local")
			if got := c.GetTransportSocket() != nil; got != tc.mtls {
				t.Fatalf("mTLS %t, want %t", got, tc.mtls)
			}
		})
	}
}

func TestServerListener(t *testing.T) {
	server := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo", model.TLSModeLabel: "istio"}}
	plain := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}}
	strict := `
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo, namespace: app}
spec: {selector: {matchLabels: {app: echo}}, mtls: {mode: STRICT}}`
	tests := map[string]struct {
		extra     string
		proxy     *Proxy
		mtls      bool
		rbacCount int
	}{
		"PERMISSIVE with tlsMode=istio serves mTLS":     {proxy: server, mtls: true},
		"PERMISSIVE without the label serves plaintext": {proxy: plain},
		"STRICT serves mTLS whatever the labels":        {proxy: plain, extra: strict, mtls: true},
		"an ALLOW and a DENY policy add two RBAC filters": {proxy: server, mtls: true, rbacCount: 2, extra: `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: app}
spec: {action: DENY, rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/bad]}}]}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: istio-system}
spec: {rules: [{from: [{source: {namespaces: [app]}}], to: [{operation: {paths: [/echo.Echo/*], ports: ["9000"]}}]}]}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			const name = InboundPrefix + "10.0.0.2:9000"
			l := build[*listener.Listener](t, load(t, tc.extra), tc.proxy, ListenerType, name)
			sa := l.GetAddress().GetSocketAddress()
			if sa.GetAddress() != "10.0.0.2" || sa.GetPortValue() != 9000 {
				t.Errorf("address %v", sa)
			}
			fc := l.GetFilterChains()[0]
			if got := fc.GetTransportSocket() != nil; got != tc.mtls {
				t.Errorf("mTLS %t, want %t", got, tc.mtls)
			}
			if tc.mtls {
				var down tlsv3.DownstreamTlsContext
				if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(&down); err != nil {
					t.Fatal(err)
				}
				if !down.GetRequireClientCertificate().GetValue() || down.GetCommonTlsContext().GetValidationContext().GetMatchSubjectAltNames() != nil {
					t.Errorf("downstream TLS %v", &down)
				}
			}
			var h hcm.HttpConnectionManager
			if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&h); err != nil {
				t.Fatal(err)
			}
			if h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetNonForwardingAction() == nil {
				t.Error("inbound route without NonForwardingAction")
			}
			filters := h.GetHttpFilters()
			if len(filters)-1 != tc.rbacCount || filters[len(filters)-1].GetName() != routerFilterName {
				t.Errorf("filters %v", filters)
			}
		})
	}
}

// Proxyless gRPC chooses its DestinationRule as Envoy sidecars do
// (model's DestinationRuleFor): a rule's workloadSelector and exportTo
// count.
func TestClusterTLSFollowsTheRuleTheClientSees(t *testing.T) {
	const name = "outbound|8080||echo.app.svc.cluster.local"
	tests := map[string]struct {
		extra string
		mtls  map[*Proxy]bool
	}{
		"a workload-selected rule applies to the workloads it selects": {extra: `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec: {host: echo, workloadSelector: {matchLabels: {app: client}}, trafficPolicy: {tls: {mode: DISABLE}}}`,
			mtls: map[*Proxy]bool{
				client: false,
				{Namespace: "app", Labels: map[string]string{"app": "other"}}:  true,
				{Namespace: "web", Labels: map[string]string{"app": "client"}}: true,
			}},
		"a rule exported to its own namespace stays there": {extra: `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec: {host: echo, exportTo: ["."], trafficPolicy: {tls: {mode: DISABLE}}}`,
			mtls: map[*Proxy]bool{client: false, {Namespace: "web"}: true}},
		"a root namespace wildcard rule applies to every client": {extra: `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: app, namespace: istio-system}
spec: {host: "*.app.svc.cluster.local", trafficPolicy: {tls: {mode: DISABLE}}}`,
			mtls: map[*Proxy]bool{client: false, {Namespace: "web"}: false}},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			snap := load(t, tc.extra)
			for p, want := range tc.mtls {
				c := build[*cluster.Cluster](t, snap, p, ClusterType, name)
				if got := c.GetTransportSocket() != nil; got != want {
					t.Errorf("client %s %v: mTLS %t, want %t", p.Namespace, p.Labels, got, want)
				}
			}
		})
	}
}

// A Service exported to its own namespace gives a client of another
// namespace none of its resources, asked for by name or by wildcard.
func TestServiceExportToHidesIt(t *testing.T) {
	snap := load(t, `
---
apiVersion: v1
kind: Service
metadata:
  name: private
  namespace: app
  annotations: {networking.istio.io/exportTo: "."}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8081, targetPort: 9000}]`)
	const host = "private.app.svc.cluster.local"
	names := map[string]string{
		ListenerType: host + ":8081", RouteType: host + ":8081",
		ClusterType: ClusterName(host, 8081), EndpointType: ClusterName(host, 8081),
	}
	g := &Generator{TrustDomain: td}
	for _, p := range []*Proxy{client, {Namespace: "web"}} {
		for typeURL, name := range names {
			visible := p.Namespace == "app"
			if got := len(g.Generate(snap, p, typeURL, []string{name}, false)) == 1; got != visible {
				t.Errorf("client of %s: %s %s generated %t, want %t", p.Namespace, typeURL, name, got, visible)
			}
			all := g.Generate(snap, p, typeURL, nil, true)
			if got := slices.ContainsFunc(all, func(r Resource) bool { return r.Name == name }); got != visible {
				t.Errorf("client of %s: wildcard %s holds %s %t, want %t", p.Namespace, typeURL, name, got, visible)
			}
		}
	}
}
