package interop

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	istiomodel "istio.io/istio/pilot/pkg/model"
	istiogrpcgen "istio.io/istio/pilot/pkg/networking/grpcgen"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/host"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// Proxyless gRPC clients under the Sidecar scenarios of the sidecar
// tests (sidecarScopeScenarios), against Istio's proxyless generator on
// the same objects: of every listener "<host>:<port>" and every cluster
// (subsets too) a client may ask for by name, which exist; and of each
// listener's route configuration, whether it has a virtual host and which
// clusters its routes name. Istio names a proxyless route configuration
// "outbound|<port>||<host>", Bulwark "<host>:<port>" (the name its
// listeners give); they are compared by host and port.

// grpcClientPods are the clients of every scenario.
var grpcClientPods = []string{"app/sleep-1", "app/echo-1", "other/backend-1"}

// TestProxylessSidecarScopeMatchesIstio runs every Sidecar scenario for
// proxyless clients.
func TestProxylessSidecarScopeMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	compared, scoped, routes := 0, 0, 0
	for _, sc := range sidecarScopeScenarios {
		t.Run(sc.name, func(t *testing.T) {
			s := istioServer(t, sc.sidecarScenario)
			snap := ourSnapshot(t, w.objects, sc.istio).WithExportDefaults(sc.defaultServiceExportTo, nil)
			listeners, clusters := grpcNames(snap)
			g := &grpcgen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
			for _, key := range grpcClientPods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioGRPCProxy(s, pod)
					if proxy.SidecarScope != nil && proxy.SidecarScope.Sidecar != nil {
						scoped++
					}
					p := &grpcgen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels}
					push := s.PushContext()
					gen := &istiogrpcgen.GrpcConfigGenerator{}

					want := resourceNames(gen.BuildListeners(proxy, push, listeners))
					got := ourNames(g.Generate(snap, p, grpcgen.ListenerType, listeners, false))
					if !slices.Equal(got, want) {
						t.Errorf("listeners: ours %q, Istio's %q", got, want)
					}
					want = resourceNames(gen.BuildClusters(proxy, push, clusters))
					got = ourNames(g.Generate(snap, p, grpcgen.ClusterType, clusters, false))
					if !slices.Equal(got, want) {
						t.Errorf("clusters: ours %q, Istio's %q", got, want)
					}
					for _, l := range listeners {
						if !grpcHTTPPort(snap, l) {
							continue // Istio gives non-HTTP ports no virtual host, scoped or not
						}
						if compareGRPCRoute(t, gen, proxy, push, g, snap, p, l) {
							routes++
						}
					}
					compared++
				})
			}
		})
	}
	if scoped == 0 || compared < 3*10 || routes == 0 {
		t.Errorf("%d clients compared, %d scoped by a Sidecar, %d routes: the scenarios test too little", compared, scoped, routes)
	}
	t.Logf("%d clients, %d of them scoped by a Sidecar, %d routes compared", compared, scoped, routes)
}

// compareGRPCRoute compares the route configurations of listener name
// "<host>:<port>": whether one has virtual hosts, and the clusters its
// routes name. It reports false when the client has no such listener
// (whose route it never asks for).
func compareGRPCRoute(t *testing.T, gen *istiogrpcgen.GrpcConfigGenerator, proxy *istiomodel.Proxy, push *istiomodel.PushContext,
	g *grpcgen.Generator, snap *model.Snapshot, p *grpcgen.Proxy, name string,
) bool {
	t.Helper()
	h, portStr, _ := strings.Cut(name, ":")
	port, _ := strconv.Atoi(portStr)
	istioName := istiomodel.BuildSubsetKey(istiomodel.TrafficDirectionOutbound, "", host.Name(h), port)
	var want, got []string
	wantHosts, gotHosts := 0, 0
	for _, r := range gen.BuildHTTPRoutes(proxy, push, []string{istioName}) {
		rc := &routev3.RouteConfiguration{}
		if err := r.GetResource().UnmarshalTo(rc); err != nil {
			t.Fatal(err)
		}
		wantHosts += len(rc.GetVirtualHosts())
		want = append(want, routeClusters(rc)...)
	}
	// Istio answers every route name it can parse; a route of a listener
	// the client does not have is never asked for.
	ours := g.Generate(snap, p, grpcgen.RouteType, []string{name}, false)
	if len(ours) == 0 && len(g.Generate(snap, p, grpcgen.ListenerType, []string{name}, false)) == 0 {
		return false
	}
	for _, r := range ours {
		m, err := r.Message(grpcgen.RouteType)
		if err != nil {
			t.Fatal(err)
		}
		rc := m.(*routev3.RouteConfiguration)
		gotHosts += len(rc.GetVirtualHosts())
		got = append(got, routeClusters(rc)...)
	}
	if (wantHosts > 0) != (gotHosts > 0) {
		t.Errorf("route %s: ours %d virtual hosts, Istio's %d", name, gotHosts, wantHosts)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
		t.Errorf("route %s names clusters %q, Istio's %q", name, got, want)
	}
	return true
}

// routeClusters are the clusters rc's routes send to.
func routeClusters(rc *routev3.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if c := a.GetCluster(); c != "" {
				out = append(out, c)
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				out = append(out, wc.GetName())
			}
		}
	}
	return out
}

// grpcNames are the names a client may ask for of every service of
// snap: its listeners "<host>:<port>", and its clusters of every port
// and subset its DestinationRules define.
func grpcNames(snap *model.Snapshot) (listeners, clusters []string) {
	for _, svc := range snap.Services() {
		for _, port := range svc.Ports {
			listeners = append(listeners, svc.Hostname+":"+strconv.FormatUint(uint64(port.Port), 10))
			clusters = append(clusters, grpcgen.ClusterName(svc.Hostname, port.Port))
			for _, dr := range snap.DestinationRulesOf(svc.Hostname) {
				for _, ss := range dr.Spec.GetSubsets() {
					clusters = append(clusters, "outbound|"+strconv.FormatUint(uint64(port.Port), 10)+"|"+ss.GetName()+"|"+svc.Hostname)
				}
			}
		}
	}
	slices.Sort(clusters)
	return listeners, slices.Compact(clusters)
}

// grpcHTTPPort reports whether the port of listener "<host>:<port>" is HTTP,
// HTTP/2 or gRPC in snap, by its protocol (appProtocol) or else its
// name's prefix, as Istio reads a Kubernetes port.
func grpcHTTPPort(snap *model.Snapshot, name string) bool {
	h, portStr, _ := strings.Cut(name, ":")
	svc := snap.Service(h)
	if svc == nil {
		return false
	}
	for _, p := range svc.Ports {
		if strconv.FormatUint(uint64(p.Port), 10) != portStr {
			continue
		}
		proto := p.Name
		if up := strings.ToUpper(p.Protocol); up != "" && up != "TCP" && up != "SCTP" {
			proto = p.Protocol
		}
		proto, _, _ = strings.Cut(strings.ToLower(proto), "-")
		switch proto {
		case "http", "http2", "grpc":
			return true
		}
	}
	return false
}

// istioGRPCProxy is pod's proxyless client as Istio knows it: the node
// metadata of a gRPC bootstrap (GENERATOR grpc) with the pod's labels.
func istioGRPCProxy(s *xds.FakeDiscoveryServer, pod *corev1.Pod) *istiomodel.Proxy {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return s.SetupProxy(&istiomodel.Proxy{
		ID:              pod.Name + "." + pod.Namespace,
		ConfigNamespace: pod.Namespace,
		IPAddresses:     []string{pod.Status.PodIP},
		Labels:          pod.Labels,
		Metadata: &istiomodel.NodeMetadata{
			Generator:      "grpc",
			Namespace:      pod.Namespace,
			ServiceAccount: sa,
			Labels:         pod.Labels,
		},
	})
}

// resourceNames are the sorted names of Istio's resources.
func resourceNames(rs istiomodel.Resources) []string {
	var out []string
	for _, r := range rs {
		switch {
		case r.GetResource().MessageIs(&listenerv3.Listener{}), r.GetResource().MessageIs(&clusterv3.Cluster{}):
			out = append(out, r.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// ourNames are the sorted names of our resources.
func ourNames(rs []grpcgen.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}
