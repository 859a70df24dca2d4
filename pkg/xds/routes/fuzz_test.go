package routes

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"
)

// FuzzGatewayRoutes feeds hostile VirtualServices (any bytes that parse
// as one) bound to a gateway with an HTTP, a passthrough and a TCP
// server: the translation must not panic, every route it returns must be
// one Envoy accepts, and what it builds stays within the limits.
func FuzzGatewayRoutes(f *testing.F) {
	for _, spec := range fuzzSeeds() {
		b, err := proto.Marshal(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	httpSrv := httpServer("*", "default/*.example.com", "./x.example.com")
	redirect := httpServer("*.example.com")
	redirect.Port = &networkingv1.Port{Number: 8080, Name: "http2", Protocol: "HTTP"}
	redirect.Tls = &networkingv1.ServerTLSSettings{HttpsRedirect: true}
	pass := &networkingv1.Server{Port: &networkingv1.Port{Number: 443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"*"},
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_PASSTHROUGH}}
	tcp := &networkingv1.Server{Port: &networkingv1.Port{Number: 31400, Name: "tcp", Protocol: "TCP"}, Hosts: []string{"*"}}
	gw := gateway(httpSrv, redirect, pass, tcp)
	f.Fuzz(func(t *testing.T, b []byte) {
		spec := &networkingv1.VirtualService{}
		if err := proto.Unmarshal(b, spec); err != nil {
			return
		}
		// Bind it, whatever it names, so the translation runs.
		spec.Gateways = append(spec.Gateways, gwNs+"/gw")
		// The same spec also serves as a delegate (without hosts) of a
		// root that delegates to it twice, and as a root itself.
		delegate := proto.CloneOf(spec)
		delegate.Hosts = nil
		root := &networkingv1.VirtualService{Hosts: []string{"root.example.com"}, Gateways: []string{gwNs + "/gw"}, Http: []*networkingv1.HTTPRoute{
			{Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/a"}}}}, Delegate: &networkingv1.Delegate{Name: "delegate"}},
			{Delegate: &networkingv1.Delegate{Name: "delegate", Namespace: "default"}},
		}}
		snap := snapshot(gw, vsOf("fuzz", "default", spec), vsOf("fuzz2", gwNs, proto.CloneOf(spec)),
			vsOf("delegate", "default", delegate), vsOf("root", "default", root))
		vhs, _ := Options{}.RouteVirtualHosts(snap, []BoundServer{{gw, httpSrv}, {gw, redirect}}, Proxy{Namespace: gwNs})
		if len(vhs) > 2*MaxHosts+len(httpSrv.Hosts)+len(redirect.Hosts) {
			t.Fatalf("%d virtual hosts", len(vhs))
		}
		for _, vh := range vhs {
			if len(vh.GetRoutes()) > MaxRoutes {
				t.Fatalf("%d routes", len(vh.GetRoutes()))
			}
			if err := vh.ValidateAll(); err != nil {
				t.Fatalf("virtual host Envoy refuses: %v", err)
			}
		}
		claimed := map[string]bool{}
		tls, _ := Options{}.GatewayTLSRoutes(snap, gw, pass, gwNs, claimed)
		for _, r := range tls {
			if len(r.SNIHosts) == 0 || len(r.Destinations) == 0 {
				t.Fatalf("TLS route %+v", r)
			}
		}
		if r, _ := (Options{}).GatewayTCPRoutes(snap, gw, tcp, gwNs); r != nil && len(r.Destinations) == 0 {
			t.Fatalf("TCP route without destinations")
		}
	})
}

func fuzzSeeds() []*networkingv1.VirtualService {
	sm := func(re string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: re}}
	}
	return []*networkingv1.VirtualService{
		{Hosts: []string{"example.com", "*"}, Http: []*networkingv1.HTTPRoute{{
			Match:  []*networkingv1.HTTPMatchRequest{{Uri: sm("/a.*"), Headers: map[string]*networkingv1.StringMatch{"x": sm("*")}, QueryParams: map[string]*networkingv1.StringMatch{"q": {}}, Port: 80}},
			Route:  []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v1"}, Weight: 10}, {Destination: &networkingv1.Destination{Host: "ratings"}, Weight: 90}},
			Mirror: &networkingv1.Destination{Host: "ratings"}, MirrorPercentage: &networkingv1.Percent{Value: 150},
			Retries: &networkingv1.HTTPRetry{Attempts: 3, RetryOn: "5xx,503"}, Timeout: durationpb.New(-1),
			CorsPolicy: &networkingv1.CorsPolicy{AllowOrigins: []*networkingv1.StringMatch{sm("(")}},
			Fault:      &networkingv1.HTTPFaultInjection{Abort: &networkingv1.HTTPFaultInjection_Abort{ErrorType: &networkingv1.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "NOPE"}}},
		}}},
		{Hosts: []string{"a.example.com"}, Http: []*networkingv1.HTTPRoute{{Redirect: &networkingv1.HTTPRedirect{Uri: "/x", RedirectCode: 1}}, {DirectResponse: &networkingv1.HTTPDirectResponse{Status: 1}}}},
		{Hosts: []string{"a.example.com"}, Tls: []*networkingv1.TLSRoute{{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: []string{"a.example.com", ""}}}, Route: []*networkingv1.RouteDestination{{}}}},
			Tcp: []*networkingv1.TCPRoute{{Route: []*networkingv1.RouteDestination{{Destination: &networkingv1.Destination{Host: "x"}, Weight: -5}}}}},
		{Hosts: []string{"x.example.com"}, Http: []*networkingv1.HTTPRoute{{Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"": "", "\x00": "\n"}}}, Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "a"}}}}}},
	}
}
