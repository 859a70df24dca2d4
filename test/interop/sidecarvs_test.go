package interop

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pilot/pkg/simulation"
)

// TestSidecarVirtualServicesMatchIstio compares, for each case of
// sidecarVSCases, what Istio's generator and ours give the sidecars of
// the case's pods for the same Kubernetes objects (sidecarWorld) and
// Istio configuration (VirtualServices, DestinationRules):
//   - every route configuration Istio's sidecar has, field by field
//     (protocmp: weights, header matchers, retry policies, timeouts,
//     per-filter fault and CORS configuration, default routes alike), with
//     only the normalizations of normalizeRoutes;
//   - Istio's simulator on both configurations, call by call: the
//     outbound calls of TestSidecarSimulation and the case's own HTTP
//     calls (paths and headers), comparing the listener, chain, cluster
//     and the name of the route matched.
func TestSidecarVirtualServicesMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	if len(sidecarVSCases) < 20 {
		t.Fatalf("%d cases, want at least 20", len(sidecarVSCases))
	}
	w := newMeshObjects(t)
	for _, c := range sidecarVSCases {
		t.Run(c.name, func(t *testing.T) {
			pods := c.pods
			if pods == nil {
				pods = []string{"app/sleep-1", "other/backend-1"}
			}
			sc := sidecarScenario{name: c.name, istio: c.istio, pods: pods}
			s := istioServer(t, sc)
			ours := ourSide(t, w, sc)
			vsRoutes := 0
			for _, key := range pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioProxy(s, pod)
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours[key].listeners, ours[key].clusters, ours[key].routes
					vsRoutes += compareRouteConfigs(t, istioSim.Routes, ourSim.Routes)
					calls := outboundCalls(w, pod)
					for _, hc := range c.calls {
						calls = append(calls, hc.simCall())
					}
					differ := 0
					for _, call := range calls {
						want, got := simulate(istioSim, call.call), simulate(&ourSim, call.call)
						ws := want.String() + ", route " + want.result.RouteMatched
						gs := got.String() + ", route " + got.result.RouteMatched
						if ws != gs {
							differ++
							t.Errorf("call %s:\n  istio: %s\n  ours:  %s\n  istio details: %s\n  ours details:  %s", call.name, ws, gs, want.details(), got.details())
						}
					}
					if differ > 0 {
						t.Logf("%d of %d calls decided differently", differ, len(calls))
					}
				})
			}
			if c.istio != "" && !c.noVSRoutes && vsRoutes == 0 {
				t.Errorf("no pod got a route of a VirtualService from Istio: the case tests nothing")
			}
		})
	}
}

// compareRouteConfigs compares every route configuration of Istio's
// with ours of the same name, and returns how many of Istio's routes come
// from a VirtualService.
func compareRouteConfigs(t *testing.T, istio, ours []*routev3.RouteConfiguration) int {
	t.Helper()
	byName := map[string]*routev3.RouteConfiguration{}
	for _, r := range ours {
		byName[r.GetName()] = r
		for _, vh := range r.GetVirtualHosts() {
			if err := vh.ValidateAll(); err != nil {
				t.Errorf("route %s: virtual host %s invalid for Envoy: %v", r.GetName(), vh.GetName(), err)
			}
		}
	}
	fromVS := 0
	for _, ir := range istio {
		or := byName[ir.GetName()]
		if or == nil {
			t.Errorf("route %s: Istio has it, we do not", ir.GetName())
			continue
		}
		if diff := cmp.Diff(normalizeRoutes(ir), normalizeRoutes(or), protocmp.Transform()); diff != "" {
			t.Errorf("route %s differs (-istio +ours):\n%s", ir.GetName(), diff)
		}
		for _, vh := range ir.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if _, ok := r.GetMetadata().GetFilterMetadata()["istio"]; ok {
					fromVS++
				}
			}
		}
	}
	return fromVS
}

// normalizeRoutes returns a copy of rc with what Istio emits in Go map
// order sorted: header, query parameter and dynamic metadata matchers.
func normalizeRoutes(rc *routev3.RouteConfiguration) *routev3.RouteConfiguration {
	rc = proto.Clone(rc).(*routev3.RouteConfiguration)
	rc.VirtualHosts = normalizeVirtualHosts(rc.GetVirtualHosts())
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			slices.SortStableFunc(r.GetMatch().GetHeaders(), func(a, b *routev3.HeaderMatcher) int {
				return strings.Compare(a.GetName(), b.GetName())
			})
		}
	}
	return rc
}

// vsCall is an outbound HTTP call of a case.
type vsCall struct {
	addr    string // default: echo's VIP
	port    int    // default: 80
	host    string // default: echo's FQDN
	path    string
	headers map[string]string
	proto   simulation.Protocol // default: HTTP
}

func (c vsCall) simCall() simCall {
	addr, port, host, proto := cmpOr(c.addr, "10.96.0.10"), c.port, cmpOr(c.host, "echo.app.svc.cluster.local"), c.proto
	if port == 0 {
		port = 80
	}
	if proto == "" {
		proto = simulation.HTTP
	}
	h := http.Header{}
	for k, v := range c.headers {
		h.Set(k, v)
	}
	return simCall{
		name: fmt.Sprintf("outbound %s to %s:%d Host %s path %s headers %v", proto, addr, port, host, c.path, c.headers),
		call: simulation.Call{CallMode: simulation.CallModeOutbound, Address: addr, Port: port, Protocol: proto, HostHeader: host, Path: c.path, Headers: h},
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
