package envoygen

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// encodeWorld is a router's Gateway with a plaintext server, a redirecting
// one and a terminated one, and VirtualServices bound to it that use what
// the translation makes: weights, header operations, fault and CORS (two
// per-filter configurations), regexes, redirects, direct responses,
// mirrors, a destination without a port.
func encodeWorld(t *testing.T) *model.Snapshot {
	redirect := httpServer(80, "secure.example.com")
	redirect.Tls = &networkingv1.ServerTLSSettings{HttpsRedirect: true}
	snap := withGateways(modeltest.Load(t, ingressManifests), gateway("istio-system", "gw", ingressSelector,
		httpServer(80, "*.example.com", "plain.example.org"), redirect,
		httpsServer(443, "https", simple("cert"), "tls.example.com")))
	dst := func(host string, port uint32, weight int32) *networkingv1.HTTPRouteDestination {
		d := &networkingv1.HTTPRouteDestination{Destination: &networkingv1.Destination{Host: host}, Weight: weight}
		if port != 0 {
			d.Destination.Port = &networkingv1.PortSelector{Number: port}
		}
		return d
	}
	vs := func(name string, hosts []string, rules ...*networkingv1.HTTPRoute) *model.VirtualService {
		return &model.VirtualService{Meta: model.Meta{Namespace: "istio-system", Name: name}, Spec: &networkingv1.VirtualService{
			Hosts: hosts, Gateways: []string{"gw"}, Http: rules}}
	}
	prefix := func(p string) []*networkingv1.HTTPMatchRequest {
		return []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: p}}},
			{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: "/r/[0-9]+"}}, IgnoreUriCase: true}}
	}
	return withVirtualServices(snap,
		vs("a", []string{"a.example.com", "tls.example.com"},
			&networkingv1.HTTPRoute{Name: "split", Match: prefix("/api"), Route: []*networkingv1.HTTPRouteDestination{
				dst("echo.app.svc.cluster.local", 80, 70), dst("other.web.svc.cluster.local", 80, 30)},
				Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-a": "1", "x-b": "2"}, Remove: []string{"x-c"}}},
				Fault: &networkingv1.HTTPFaultInjection{Abort: &networkingv1.HTTPFaultInjection_Abort{ErrorType: &networkingv1.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 503},
					Percentage: &networkingv1.Percent{Value: 1}}},
				CorsPolicy: &networkingv1.CorsPolicy{AllowMethods: []string{"GET"}, AllowOrigins: []*networkingv1.StringMatch{{MatchType: &networkingv1.StringMatch_Exact{Exact: "https://x.example.com"}}}}},
			&networkingv1.HTTPRoute{Name: "rest", Route: []*networkingv1.HTTPRouteDestination{dst("other.web.svc.cluster.local", 0, 0)},
				Mirror:  &networkingv1.Destination{Host: "echo.app.svc.cluster.local", Port: &networkingv1.PortSelector{Number: 80}},
				Timeout: durationpb.New(3 * time.Second)}),
		vs("b", []string{"b.example.com", "plain.example.org"},
			&networkingv1.HTTPRoute{Match: prefix("/old"), Redirect: &networkingv1.HTTPRedirect{Uri: "/new", RedirectCode: 308}},
			&networkingv1.HTTPRoute{DirectResponse: &networkingv1.HTTPDirectResponse{Status: 404, Body: &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_String_{String_: "none"}}}}),
		vs("c", []string{"secure.example.com"}, &networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{dst("echo.app.svc.cluster.local", 80, 0)}}),
	)
}

// protoRoute is the route configuration name of servers as messages,
// from the translation that builds every route as a message
// (routes.Options.RouteVirtualHosts): what the generator's encoding of
// it must be, marshalled by proto.
func (b *builder) protoRoute(name string, servers []*gwServer) *route.RouteConfiguration {
	bound := make([]routes.BoundServer, len(servers))
	for i, s := range servers {
		bound[i] = routes.BoundServer{Gateway: s.gw, Server: s.server}
	}
	vhosts, _ := b.g.Mesh.Routes.RouteVirtualHosts(b.snap, bound, routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels})
	return &route.RouteConfiguration{
		Name:                           name,
		VirtualHosts:                   vhosts,
		ValidateClusters:               wrapperspb.Bool(false),
		IgnorePortInHostMatching:       true,
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	}
}

// routerRoutes are the encodings of the router's route configurations
// that g generates from snap, by name, each checked against the
// configuration the translation builds as messages, marshalled by
// proto.
func routerRoutes(t *testing.T, g *Generator, snap *model.Snapshot) map[string][]byte {
	t.Helper()
	b := &builder{g: g, snap: snap, p: ingress()}
	m := b.merged()
	out := map[string][]byte{}
	for _, r := range g.Generate(snap, ingress(), resource.RouteType, nil, true) {
		raw, err := r.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.protoRoute(r.Name, m.routes[r.Name]))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, want) {
			t.Errorf("%s: encoded %d bytes differ from proto's deterministic marshalling (%d bytes)", r.Name, len(raw), len(want))
		}
		out[r.Name] = raw
	}
	if len(out) < 2 {
		t.Fatalf("%d route configurations: the test checks too little", len(out))
	}
	return out
}

// changed is snap with res changed by change, sharing what change leaves.
func changed(snap *model.Snapshot, version string, change func(res *model.Resources)) *model.Snapshot {
	res := *snap.Resources()
	change(&res)
	return model.BuildShared(version, snap.Options, res, snap)
}

func TestGatewayRoutesAreEncodedAsProtoMarshalsThem(t *testing.T) {
	snap := encodeWorld(t)
	g := &Generator{TrustDomain: td}
	first := routerRoutes(t, g, snap)
	// Every virtual host and route is there.
	var rc route.RouteConfiguration
	if err := proto.Unmarshal(first["http.8080"], &rc); err != nil || len(rc.GetVirtualHosts()) < 3 {
		t.Fatalf("http.8080: %d virtual hosts, %v", len(rc.GetVirtualHosts()), err)
	}
}

// TestTranslationsFollowWhatTheyRead: a snapshot after another reuses the
// translations of the VirtualServices that did not change, and gives
// what a generator that never saw the first one gives, when a
// VirtualService changes, when a service a destination without a port
// goes to changes its port, and when a DestinationRule asks for a
// consistent hash.
func TestTranslationsFollowWhatTheyRead(t *testing.T) {
	g := &Generator{TrustDomain: td}
	snap := encodeWorld(t)
	routerRoutes(t, g, snap)
	steps := []struct {
		name   string
		change func(res *model.Resources)
	}{
		{"a VirtualService changed", func(res *model.Resources) {
			res.VirtualServices = append([]*model.VirtualService{}, res.VirtualServices...)
			c := *res.VirtualServices[2]
			c.Spec = proto.CloneOf(c.Spec)
			c.Spec.Http[0].Timeout = durationpb.New(7 * time.Second)
			res.VirtualServices[2] = &c
		}},
		{"the port of a destination's service changed", func(res *model.Resources) {
			res.Services = append([]*model.Service{}, res.Services...)
			for i, svc := range res.Services {
				if svc.Name == "other" {
					c := *svc
					c.Ports = []model.Port{{Name: "http-web", Port: 8081, TargetPort: 8000}}
					res.Services[i] = &c
				}
			}
		}},
		{"a DestinationRule asks for a consistent hash", func(res *model.Resources) {
			res.DestinationRules = []*model.DestinationRule{{Meta: model.Meta{Namespace: "web", Name: "hash"}, Spec: &networkingv1.DestinationRule{
				Host: "other.web.svc.cluster.local", TrafficPolicy: &networkingv1.TrafficPolicy{LoadBalancer: &networkingv1.LoadBalancerSettings{
					LbPolicy: &networkingv1.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networkingv1.LoadBalancerSettings_ConsistentHashLB{
						HashKey: &networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}}}}
		}},
	}
	for i, step := range steps {
		next := changed(snap, snap.Version+"+", step.change)
		got := routerRoutes(t, g, next)
		want := routerRoutes(t, &Generator{TrustDomain: td}, next)
		for name, raw := range want {
			if !bytes.Equal(got[name], raw) {
				t.Errorf("%s: %s differs from a fresh generator's", step.name, name)
			}
		}
		before := routerRoutes(t, &Generator{TrustDomain: td}, snap)
		if same := bytes.Equal(before["http.8080"], got["http.8080"]) && bytes.Equal(before["https.443.https.gw.istio-system"], got["https.443.https.gw.istio-system"]); same {
			t.Errorf("step %d (%s) changes nothing: the test checks nothing", i, step.name)
		}
		snap = next
	}
}

func TestUnchangedVirtualServicesAreNotTranslatedAgain(t *testing.T) {
	g := &Generator{TrustDomain: td}
	snap := encodeWorld(t)
	// A route's wire form is where its translation keeps it: the same
	// bytes, not equal ones, are a translation reused.
	routesOf := func(snap *model.Snapshot) map[string]*byte {
		b := &builder{g: g, snap: snap, p: ingress()}
		m := b.merged()
		out := map[string]*byte{}
		for _, r := range g.Generate(snap, ingress(), resource.RouteType, nil, true) {
			hosts, _ := b.memoRoute(r.Key, r.Name, m.routes[r.Name])
			for _, vh := range hosts {
				for i, rt := range vh.Routes {
					out[fmt.Sprint(r.Name, " ", vh.Name, " ", i)] = &rt[0]
				}
			}
		}
		return out
	}
	before := routesOf(snap)
	next := changed(snap, "2", func(res *model.Resources) {
		res.VirtualServices = append([]*model.VirtualService{}, res.VirtualServices...)
		c := *res.VirtualServices[1] // "b"
		res.VirtualServices[1] = &c
	})
	after := routesOf(next)
	reused, again := 0, 0
	for k, r := range after {
		switch {
		case before[k] == r:
			reused++
		case before[k] != nil:
			again++
		}
	}
	// "b" has three routes (two matches of one rule, then the direct
	// response) on the plaintext route; "a" and "c" are reused.
	if again != 3 || reused < 4 {
		t.Errorf("%d routes translated again, %d reused; want 3 and the rest", again, reused)
	}
}
