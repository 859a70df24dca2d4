package xds

import (
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// routerNode is pilot-agent's node in router mode for gateway pod
// <sa>-1 of ns, claiming labels.
func routerNode(ns, sa, ip string, labels map[string]any, extra map[string]any) *core.Node {
	fields := map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "INSTANCE_IPS": ip, "LABELS": labels}
	for k, v := range extra {
		fields[k] = v
	}
	md, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: "router~" + ip + "~" + sa + "-1." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

const ingressIdentity = "spiffe://cluster.local/ns/gw/sa/ingress"

func ingressGateway(name string, created time.Time, servers ...*networkingv1.Server) *model.Gateway {
	return &model.Gateway{
		Meta: model.Meta{Namespace: "gw", Name: name}, Created: created,
		Spec: &networkingv1.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: servers},
	}
}

func httpsServer(port uint32, name, credential string, hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{
		Port: &networkingv1.Port{Number: port, Name: name, Protocol: "HTTPS"}, Hosts: hosts,
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: credential},
	}
}

// gatewaySnapshot is envoyManifests with the gateway pod ingress-1 of
// namespace gw in the registry (labels istio=ingressgateway, service
// account ingress) and gws.
func gatewaySnapshot(t *testing.T, version string, gws ...*model.Gateway) *model.Snapshot {
	t.Helper()
	return gatewaySnapshotWith(t, version, "", gws...)
}

// gatewaySnapshotWith is gatewaySnapshot with more manifests.
func gatewaySnapshotWith(t *testing.T, version, manifests string, gws ...*model.Gateway) *model.Snapshot {
	t.Helper()
	res := *modeltest.Load(t, envoyManifests+manifests).Resources()
	res.Pods = []*model.Pod{{Meta: model.Meta{Name: "ingress-1", Namespace: "gw"}, ServiceAccount: "ingress", Labels: map[string]string{"istio": "ingressgateway"}, IPs: []string{"10.0.3.1"}}}
	res.Gateways = gws
	return model.Build(version, model.Options{}, res)
}

// listenerNames asks for every listener and returns their names.
func listenerNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		out = append(out, unmarshal(t, a, &listener.Listener{}).GetName())
	}
	slices.Sort(out)
	return out
}

func TestRouterIsBoundToItsPod(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := gatewaySnapshot(t, "v1",
		ingressGateway("public", start, httpsServer(443, "https", "cert", "shop.example.com")),
		// A Gateway selecting what the node claims, not what its pod has.
		&model.Gateway{Meta: model.Meta{Namespace: "gw", Name: "claimed"}, Spec: &networkingv1.Gateway{
			Selector: map[string]string{"istio": "claimed"},
			Servers:  []*networkingv1.Server{{Port: &networkingv1.Port{Number: 8000, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}},
		}})
	h := newHarness(t, snap, nil)
	st := h.stream(ingressIdentity)
	node := routerNode("gw", "ingress", "10.9.9.9", map[string]any{"istio": "claimed"}, nil)
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	if got := listenerNames(t, recv(t, st)); !slices.Equal(got, []string{"0.0.0.0_443"}) {
		t.Fatalf("listeners %v: want those of the Gateway selecting the pod's labels, not the claimed ones", got)
	}
}

func TestRoutersOfOtherIdentitiesAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		caller string
		node   *core.Node
		code   codes.Code
	}{
		"a router claiming another identity than the caller's": {clientID, routerNode("gw", "ingress", "10.0.3.1", nil, nil), codes.PermissionDenied},
		"a router naming a pod of another service account":     {"spiffe://cluster.local/ns/gw/sa/other", withID(routerNode("gw", "other", "10.0.3.1", nil, nil), "router~10.0.3.1~ingress-1.gw~gw.svc.cluster.local"), codes.PermissionDenied},
		"a router naming a pod of another namespace":           {ingressIdentity, withID(routerNode("gw", "ingress", "10.0.3.1", nil, nil), "router~10.0.3.1~ingress-1.app~app.svc.cluster.local"), codes.InvalidArgument},
		"a proxy type that is not served":                      {ingressIdentity, withID(routerNode("gw", "ingress", "10.0.3.1", nil, nil), "ztunnel~10.0.3.1~ingress-1.gw~gw.svc.cluster.local"), codes.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, gatewaySnapshot(t, "v1"), nil)
			st := h.stream(tc.caller)
			if err := st.Send(&discovery.DiscoveryRequest{Node: tc.node, TypeUrl: resource.ListenerType}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
}

func TestUnprivilegedRouterSkipsLowPorts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := gatewaySnapshot(t, "v1", ingressGateway("public", start,
		httpsServer(443, "https", "cert", "shop.example.com"), httpsServer(8443, "https-alt", "cert", "shop.example.com")))
	for _, tc := range []struct {
		value string
		want  []string
	}{{"true", []string{"0.0.0.0_8443"}}, {"false", []string{"0.0.0.0_443", "0.0.0.0_8443"}}, {"", []string{"0.0.0.0_443", "0.0.0.0_8443"}}} {
		h := newHarness(t, snap, nil)
		st := h.stream(ingressIdentity)
		extra := map[string]any{}
		if tc.value != "" {
			extra["UNPRIVILEGED_POD"] = tc.value
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: routerNode("gw", "ingress", "10.0.3.1", nil, extra), TypeUrl: resource.ListenerType}); err != nil {
			t.Fatal(err)
		}
		if got := listenerNames(t, recv(t, st)); !slices.Equal(got, tc.want) {
			t.Errorf("UNPRIVILEGED_POD=%q: listeners %v, want %v", tc.value, got, tc.want)
		}
	}
}

// TestGatewayChangesAreServed: a Gateway added, changed and in conflict
// reaches the router; the conflict is logged and counted once, and the
// router keeps serving the older server.
func TestGatewayChangesAreServed(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec, log := logtest.New(t)
	h := newHarness(t, gatewaySnapshot(t, "v1"), func(c *Config) { c.Logger = log })
	st := h.stream(ingressIdentity)
	if err := st.Send(&discovery.DiscoveryRequest{Node: routerNode("gw", "ingress", "10.0.3.1", nil, nil), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	ack := func(r *discovery.DiscoveryResponse) {
		t.Helper()
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	r := recv(t, st)
	if got := listenerNames(t, r); len(got) != 0 {
		t.Fatalf("listeners %v before any Gateway", got)
	}
	ack(r)
	public := ingressGateway("public", start, httpsServer(443, "https", "cert", "shop.example.com"))
	h.store.Publish(gatewaySnapshot(t, "v2", public))
	r = recv(t, st)
	if got := listenerNames(t, r); !slices.Equal(got, []string{"0.0.0.0_443"}) {
		t.Fatalf("listeners %v after a Gateway was added", got)
	}
	ack(r)
	// A newer Gateway of the same host on the same port: Envoy could not
	// tell the two chains apart, so the newer one is left out.
	rival := ingressGateway("rival", start.Add(time.Hour), httpsServer(443, "https", "rival", "shop.example.com"), httpsServer(9443, "https", "rival", "shop.example.com"))
	h.store.Publish(gatewaySnapshot(t, "v3", public, rival))
	r = recv(t, st)
	if got := listenerNames(t, r); !slices.Equal(got, []string{"0.0.0.0_443", "0.0.0.0_9443"}) {
		t.Fatalf("listeners %v after a rival Gateway was added", got)
	}
	for _, a := range r.GetResources() {
		if l := unmarshal(t, a, &listener.Listener{}); l.GetName() == "0.0.0.0_443" && len(l.GetFilterChains()) != 1 {
			t.Fatalf("0.0.0.0_443 has %d chains, want the older server's alone", len(l.GetFilterChains()))
		}
	}
	waitFor(t, "the conflict counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Gateway", "server_conflict")) == 1
	})
	if n := rec.Count("gateway server not served"); n != 1 {
		t.Errorf("conflict logged %d times, want once", n)
	}
}

// TestRouterWarmsOverDelta plays Envoy's warming over incremental ADS
// for a router: CDS, EDS of every EDS cluster, LDS, then RDS of every
// route a listener names, each answered in full.
func TestRouterWarmsOverDelta(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	plain := &networkingv1.Server{Port: &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}
	h := newHarness(t, gatewaySnapshot(t, "v1", ingressGateway("public", start, plain, httpsServer(443, "https", "cert", "shop.example.com"))), nil)
	st := h.deltaStream(ingressIdentity)
	ask := func(first bool, typeURL string, names []string) []*discovery.Resource {
		t.Helper()
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}
		if first {
			req.Node = routerNode("gw", "ingress", "10.0.3.1", nil, nil)
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		r := recvDelta(t, st)
		if r.GetTypeUrl() != typeURL {
			t.Fatalf("asked %s, got %s", typeURL, r.GetTypeUrl())
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return r.GetResources()
	}
	var edsNames []string
	for _, r := range ask(true, resource.ClusterType, nil) {
		c := unmarshal(t, r.GetResource(), &cluster.Cluster{})
		if c.GetType() == cluster.Cluster_EDS {
			edsNames = append(edsNames, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	if len(edsNames) == 0 {
		t.Fatal("no EDS cluster")
	}
	if got := ask(false, resource.EndpointType, edsNames); len(got) != len(edsNames) {
		t.Fatalf("asked %d load assignments, got %d", len(edsNames), len(got))
	}
	var routes []string
	for _, r := range ask(false, resource.ListenerType, nil) {
		l := unmarshal(t, r.GetResource(), &listener.Listener{})
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if m := unmarshal(t, f.GetTypedConfig(), &hcm.HttpConnectionManager{}); m.GetRds() != nil {
					routes = append(routes, m.GetRds().GetRouteConfigName())
				}
			}
		}
	}
	slices.Sort(routes)
	if want := []string{"http.80", "https.443.https.public.gw"}; !slices.Equal(routes, want) {
		t.Fatalf("listeners name routes %v, want %v", routes, want)
	}
	if got := ask(false, resource.RouteType, routes); len(got) != len(routes) {
		t.Fatalf("asked routes %v, got %d", routes, len(got))
	}
}

// TestRouterAuthorizationChangesAreServed: an AuthorizationPolicy
// selecting the gateway pod, added, reaches its listeners' chains.
func TestRouterAuthorizationChangesAreServed(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gw := ingressGateway("public", start, httpsServer(443, "https", "cert", "shop.example.com"))
	h := newHarness(t, gatewaySnapshot(t, "v1", gw), nil)
	st := h.stream(ingressIdentity)
	if err := st.Send(&discovery.DiscoveryRequest{Node: routerNode("gw", "ingress", "10.0.3.1", nil, nil), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	hasRBAC := func(r *discovery.DiscoveryResponse) bool {
		t.Helper()
		for _, a := range r.GetResources() {
			for _, fc := range unmarshal(t, a, &listener.Listener{}).GetFilterChains() {
				if chainHasRBAC(t, fc) {
					return true
				}
			}
		}
		return false
	}
	r := recv(t, st)
	if hasRBAC(r) {
		t.Fatal("RBAC before any policy")
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	h.store.Publish(gatewaySnapshotWith(t, "v2", `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress, namespace: gw}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
`, gw))
	if r := recv(t, st); !hasRBAC(r) {
		t.Fatal("the policy selecting the gateway did not reach its chains")
	}
}

// TestVirtualServiceChangesReachRouters: a VirtualService bound to a
// router's Gateway changes its routes; one whose regex Envoy would
// refuse is left out, counted and logged, and the rest keeps serving.
func TestVirtualServiceChangesReachRouters(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec, log := logtest.New(t)
	public := ingressGateway("public", start, &networkingv1.Server{Port: &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}})
	snapWith := func(version string, vss ...*model.VirtualService) *model.Snapshot {
		res := *gatewaySnapshot(t, version, public).Resources()
		res.VirtualServices = vss
		return model.Build(version, model.Options{}, res)
	}
	vs := func(name, host, regex string) *model.VirtualService {
		route := &networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "web.app.svc.cluster.local"}}}}
		if regex != "" {
			route.Match = []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: regex}}}}
		}
		return &model.VirtualService{Meta: model.Meta{Namespace: "gw", Name: name}, Created: start,
			Spec: &networkingv1.VirtualService{Hosts: []string{host}, Gateways: []string{"public"}, Http: []*networkingv1.HTTPRoute{route}}}
	}
	h := newHarness(t, snapWith("v1"), func(c *Config) { c.Logger = log })
	st := h.stream(ingressIdentity)
	if err := st.Send(&discovery.DiscoveryRequest{Node: routerNode("gw", "ingress", "10.0.3.1", nil, nil), TypeUrl: resource.RouteType, ResourceNames: []string{"http.80"}}); err != nil {
		t.Fatal(err)
	}
	domains := func(r *discovery.DiscoveryResponse) []string {
		t.Helper()
		var out []string
		for _, a := range r.GetResources() {
			for _, vh := range unmarshal(t, a, &route.RouteConfiguration{}).GetVirtualHosts() {
				out = append(out, vh.GetDomains()...)
			}
		}
		slices.Sort(out)
		return out
	}
	ack := func(r *discovery.DiscoveryResponse) {
		t.Helper()
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: []string{"http.80"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	r := recv(t, st)
	if got := domains(r); !slices.Equal(got, []string{"*"}) {
		t.Fatalf("domains %v without VirtualServices, want the blackhole's", got)
	}
	ack(r)
	h.store.Publish(snapWith("v2", vs("shop", "shop.example.com", "")))
	r = recv(t, st)
	if got := domains(r); !slices.Equal(got, []string{"shop.example.com"}) {
		t.Fatalf("domains %v after a VirtualService was added", got)
	}
	ack(r)
	h.store.Publish(snapWith("v3", vs("shop", "shop.example.com", ""), vs("bad", "bad.example.com", "(a")))
	waitFor(t, "the VirtualService left out counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("VirtualService", "route_left_out")) == 1
	})
	if n := rec.Count("virtual service not routed as written"); n != 1 {
		t.Errorf("left-out VirtualService logged %d times, want once", n)
	}
	// Nothing changed for the router: no response beyond the probe's.
	noResponse(t, st, resource.ClusterType)
}
