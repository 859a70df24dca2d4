package interop

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	networkingv1 "istio.io/api/networking/v1"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"

	bmodel "github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// gwRouteCase is one comparison of a gateway's route configurations: the
// Gateway "gateway" in istio-system (selecting istio=ingressgateway) with
// servers, and the VirtualServices, DestinationRules and services of the
// world below.
type gwRouteCase struct {
	name    string
	servers []*networkingv1.Server // default: HTTP 80, hosts ["*"]
	vss     []gwVS
	drs     []*networkingv1.DestinationRule // in namespace default, named dr<i>
	// opts are mesh settings: Istio gets them in its mesh config
	// (defaultHttpRetryPolicy, defaultVirtualServiceExportTo).
	opts routes.Options
}

type gwVS struct {
	name, ns string
	spec     *networkingv1.VirtualService
}

const gwNs = "istio-system"

// gwServices: reviews has one port (destinations without a port take it),
// ratings two (they take the listener's).
var gwServices = []struct {
	name, ns string
	ports    []uint32
}{
	{"reviews", "default", []uint32{9080}},
	{"ratings", "default", []uint32{80, 9090}},
	{"details", "other", []uint32{8080}},
	{"mirror", "default", []uint32{80}},
}

// TestGatewayRoutesMatchIstio compares, for each case, every HTTP route
// configuration a gateway pod gets from Istio's generator
// (core.ConfigGenTest, BuildHTTPRoutes for a Router proxy) with the
// virtual hosts routes.RouteVirtualHosts gives for the servers sharing it,
// field by field (protocmp, which compares packed Any fields by content).
// Normalizations, each a difference in what Istio leaves to map order or
// sets outside the translation:
//   - query parameter matchers are sorted by name: Istio emits them in
//     Go map order, which varies from run to run; ours are sorted;
//   - dynamic metadata matchers (JWT claims) are sorted by their text,
//     for the same reason;
//   - only virtual_hosts are compared: the route configuration's own
//     fields (name, validate_clusters, ignore_port_in_host_matching,
//     max_direct_response_body_size_bytes) belong to the caller.
//
// Every generated route must also pass Envoy's ValidateAll.
func TestGatewayRoutesMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	if len(gwRouteCases) < 25 {
		t.Fatalf("%d cases, want at least 25", len(gwRouteCases))
	}
	for _, c := range gwRouteCases {
		t.Run(c.name, func(t *testing.T) {
			servers := c.servers
			if servers == nil {
				servers = []*networkingv1.Server{httpServer(80, "*")}
			}
			istio := istioGatewayRoutes(t, c, servers)
			snap, gw := ourGatewayWorld(c, servers)
			byRoute := map[string][]routes.BoundServer{}
			for _, s := range servers {
				name := gatewayRouteName(s)
				byRoute[name] = append(byRoute[name], routes.BoundServer{Gateway: gw, Server: s})
			}
			if len(istio) != len(byRoute) {
				t.Fatalf("istio built %d route configurations, the servers have %d", len(istio), len(byRoute))
			}
			for name, rc := range istio {
				bound, ok := byRoute[name]
				if !ok {
					t.Fatalf("istio route configuration %q not among the servers'", name)
				}
				ours, problems := c.opts.RouteVirtualHosts(snap, bound, routes.Proxy{Namespace: gwNs, Labels: gwLabels})
				for _, p := range problems {
					if strings.HasPrefix(c.name, "delegation") {
						t.Logf("problem (Istio leaves the same out): %s", p)
						continue
					}
					t.Errorf("problem: %s", p)
				}
				for _, vh := range ours {
					if err := vh.ValidateAll(); err != nil {
						t.Errorf("virtual host %s invalid for Envoy: %v", vh.GetName(), err)
					}
				}
				want := normalizeVirtualHosts(rc.GetVirtualHosts())
				if diff := cmp.Diff(want, normalizeVirtualHosts(ours), protocmp.Transform()); diff != "" {
					t.Errorf("route %s: virtual hosts differ (-istio +ours):\n%s", name, diff)
				}
				if len(want) == 0 || (len(want) == 1 && strings.HasPrefix(want[0].GetName(), "blackhole:") && !c.expectBlackhole()) {
					t.Errorf("route %s: Istio built no virtual host from the case: the case tests nothing", name)
				}
			}
		})
	}
}

func (c gwRouteCase) expectBlackhole() bool { return strings.Contains(c.name, "blackhole") }

var gwLabels = map[string]string{"istio": "ingressgateway"}

func httpServer(port uint32, hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{Port: &networkingv1.Port{Number: port, Name: "http-" + strconv.Itoa(int(port)), Protocol: "HTTP"}, Hosts: hosts}
}

func httpsServer(port uint32, name string, hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{
		Port:  &networkingv1.Port{Number: port, Name: name, Protocol: "HTTPS"},
		Hosts: hosts,
		Tls:   &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: "cert"},
	}
}

// gatewayRouteName is the route configuration Istio gives a server:
// "http.<port>" for plaintext HTTP (no gateway Service here, so the
// server port is the target port), "https.<port>.<port name>.<gateway>.<ns>"
// for a terminated HTTPS server.
func gatewayRouteName(s *networkingv1.Server) string {
	if s.GetTls() != nil && s.GetPort().GetProtocol() == "HTTPS" {
		return fmt.Sprintf("https.%d.%s.gateway.%s", s.GetPort().GetNumber(), s.GetPort().GetName(), gwNs)
	}
	return fmt.Sprintf("http.%d", s.GetPort().GetNumber())
}

func istioGatewayRoutes(t *testing.T, c gwRouteCase, servers []*networkingv1.Server) map[string]*routev3.RouteConfiguration {
	t.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	configs := []config.Config{{
		Meta: config.Meta{GroupVersionKind: gvk.Gateway, Name: "gateway", Namespace: gwNs, CreationTimestamp: base},
		Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers},
	}}
	configs = append(configs, istioServiceEntries(base)...)
	for i, vs := range c.vss {
		configs = append(configs, config.Config{
			Meta: config.Meta{GroupVersionKind: gvk.VirtualService, Name: vs.name, Namespace: vs.ns, Domain: "cluster.local", CreationTimestamp: base.Add(time.Duration(i) * time.Minute)},
			Spec: vs.spec,
		})
	}
	for i, dr := range c.drs {
		configs = append(configs, config.Config{
			Meta: config.Meta{GroupVersionKind: gvk.DestinationRule, Name: "dr" + strconv.Itoa(i), Namespace: "default", Domain: "cluster.local", CreationTimestamp: base},
			Spec: dr,
		})
	}
	m := mesh.DefaultMeshConfig()
	m.DefaultHttpRetryPolicy = c.opts.DefaultRetry
	m.DefaultVirtualServiceExportTo = c.opts.DefaultExportTo
	cg := core.NewConfigGenTest(t, core.TestOptions{Configs: configs, MeshConfig: m})
	proxy := cg.SetupProxy(&model.Proxy{
		Type: model.Router, ConfigNamespace: gwNs, Labels: gwLabels, ID: "gw.istio-system",
		Metadata: &model.NodeMetadata{Namespace: gwNs, Labels: gwLabels},
	})
	var names []string
	for _, s := range servers {
		if n := gatewayRouteName(s); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	resources, _ := cg.ConfigGen.BuildHTTPRoutes(proxy, &model.PushRequest{Push: cg.PushContext()}, names)
	out := map[string]*routev3.RouteConfiguration{}
	for _, r := range resources {
		rc := &routev3.RouteConfiguration{}
		if err := r.Resource.UnmarshalTo(rc); err != nil {
			t.Fatal(err)
		}
		out[rc.GetName()] = rc
	}
	return out
}

func ourGatewayWorld(c gwRouteCase, servers []*networkingv1.Server) (*bmodel.Snapshot, *bmodel.Gateway) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gw := &bmodel.Gateway{Meta: bmodel.Meta{Name: "gateway", Namespace: gwNs}, Created: base,
		Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers}}
	res := bmodel.Resources{Gateways: []*bmodel.Gateway{gw}}
	for _, s := range gwServices {
		svc := &bmodel.Service{Meta: bmodel.Meta{Name: s.name, Namespace: s.ns}}
		for _, p := range s.ports {
			svc.Ports = append(svc.Ports, bmodel.Port{Name: "http-" + strconv.Itoa(int(p)), Port: p, Protocol: "HTTP"})
		}
		res.Services = append(res.Services, svc)
	}
	for i, vs := range c.vss {
		res.VirtualServices = append(res.VirtualServices, &bmodel.VirtualService{
			Meta: bmodel.Meta{Name: vs.name, Namespace: vs.ns}, Created: base.Add(time.Duration(i) * time.Minute), Spec: vs.spec,
		})
	}
	for i, dr := range c.drs {
		res.DestinationRules = append(res.DestinationRules, &bmodel.DestinationRule{Meta: bmodel.Meta{Name: "dr" + strconv.Itoa(i), Namespace: "default"}, Spec: dr})
	}
	return bmodel.Build("1", bmodel.Options{}, res), gw
}

// normalizeVirtualHosts sorts each route's query parameter and dynamic
// metadata matchers (see the test's comment); it changes copies.
func normalizeVirtualHosts(in []*routev3.VirtualHost) []*routev3.VirtualHost {
	out := make([]*routev3.VirtualHost, 0, len(in))
	for _, vh := range in {
		vh = proto.Clone(vh).(*routev3.VirtualHost)
		for _, r := range vh.GetRoutes() {
			slices.SortStableFunc(r.GetMatch().GetQueryParameters(), func(a, b *routev3.QueryParameterMatcher) int {
				return strings.Compare(a.GetName(), b.GetName())
			})
			slices.SortStableFunc(r.GetMatch().GetDynamicMetadata(), func(a, b *matcherv3.MetadataMatcher) int {
				return strings.Compare(prototext.Format(a), prototext.Format(b))
			})
		}
		out = append(out, vh)
	}
	return out
}

// istioServiceEntries are gwServices as Istio reads them.
func istioServiceEntries(base time.Time) []config.Config {
	var configs []config.Config
	for i, s := range gwServices {
		var ports []*networkingv1.ServicePort
		for _, p := range s.ports {
			ports = append(ports, &networkingv1.ServicePort{Number: p, Name: "http-" + strconv.Itoa(int(p)), Protocol: "HTTP"})
		}
		configs = append(configs, config.Config{
			Meta: config.Meta{GroupVersionKind: gvk.ServiceEntry, Name: s.name, Namespace: s.ns, CreationTimestamp: base},
			Spec: &networkingv1.ServiceEntry{
				Hosts: []string{s.name + "." + s.ns + ".svc.cluster.local"}, Ports: ports,
				Addresses:  []string{fmt.Sprintf("10.10.0.%d", i+1)},
				Location:   networkingv1.ServiceEntry_MESH_INTERNAL,
				Resolution: networkingv1.ServiceEntry_STATIC,
				Endpoints:  []*networkingv1.WorkloadEntry{{Address: fmt.Sprintf("10.20.0.%d", i+1)}},
			},
		})
	}
	return configs
}
