package interop

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

const gwRef = "istio-system/gateway"

func exact(s string) *networkingv1.StringMatch {
	return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: s}}
}

func prefix(s string) *networkingv1.StringMatch {
	return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: s}}
}

func regex(s string) *networkingv1.StringMatch {
	return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: s}}
}

func dst(host string) []*networkingv1.HTTPRouteDestination {
	return []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: host}}}
}

// vs1 is a VirtualService "vs" in default for host example.com bound to
// the gateway, with rules.
func vs1(rules ...*networkingv1.HTTPRoute) []gwVS {
	return []gwVS{{name: "vs", ns: "default", spec: &networkingv1.VirtualService{
		Hosts: []string{"example.com"}, Gateways: []string{gwRef}, Http: rules,
	}}}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

var gwRouteCases = []gwRouteCase{
	{name: "uri exact, prefix and regex to a short-named one-port service", vss: vs1(
		&networkingv1.HTTPRoute{Name: "exact", Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/login")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Name: "prefix", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/api/")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Name: "regex", Match: []*networkingv1.HTTPMatchRequest{{Uri: regex("/v[0-9]+/.*")}}, Route: dst("ratings")},
	)},
	{name: "destination port and subset, FQDN host", vss: vs1(&networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{{
		Destination: &networkingv1.Destination{Host: "ratings.default.svc.cluster.local", Port: &networkingv1.PortSelector{Number: 9090}, Subset: "v2"},
	}}})},
	{name: "weighted destinations, weight zero left out", vss: vs1(&networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{
		{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v1"}, Weight: 75},
		{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v2"}, Weight: 25},
		{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v3"}, Weight: 0},
	}})},
	{name: "header matches exact prefix regex and present", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{
			"x-user": exact("jason"), "x-env": prefix("prod"), "x-id": regex("[a-f0-9]{8}"), "x-any": regex("*"), "x-empty": {},
		}}},
		Route: dst("reviews"),
	}, &networkingv1.HTTPRoute{Route: dst("ratings")})},
	{name: "withoutHeaders", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{WithoutHeaders: map[string]*networkingv1.StringMatch{
			"x-debug": exact("1"), "x-canary": {}, "x-b": regex("*"),
		}, Headers: map[string]*networkingv1.StringMatch{"x-a": exact("a")}}},
		Route: dst("reviews"),
	})},
	{name: "query parameters", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{QueryParams: map[string]*networkingv1.StringMatch{
			"version": exact("v2"), "debug": regex("*"), "id": regex("[0-9]+"), "flag": {}, "p": prefix("x"),
		}}},
		Route: dst("reviews"),
	})},
	{name: "method authority and scheme", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{Method: exact("POST"), Authority: prefix("example"), Scheme: exact("https"), Uri: prefix("/")}},
		Route: dst("reviews"),
	})},
	{name: "ignoreUriCase and named matches with stat prefix", vss: vs1(&networkingv1.HTTPRoute{
		Name: "rule",
		Match: []*networkingv1.HTTPMatchRequest{
			{Name: "upper", Uri: prefix("/Admin"), IgnoreUriCase: true, StatPrefix: "admin"},
			{Name: "lower", Uri: exact("/x")},
		},
		Route: dst("reviews"),
	})},
	{name: "match port: the listener's applies, another not", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{Port: 80, Uri: prefix("/a")}, {Port: 8080, Uri: prefix("/b")}},
		Route: dst("reviews"),
	})},
	{name: "match gateways: this gateway, short and qualified, and another", vss: []gwVS{{name: "vs", ns: "istio-system", spec: &networkingv1.VirtualService{
		Hosts: []string{"example.com"}, Gateways: []string{"gateway", "mesh"},
		Http: []*networkingv1.HTTPRoute{
			{Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{"mesh"}, Uri: prefix("/mesh")}}, Route: dst("reviews.default.svc.cluster.local")},
			{Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{"gateway"}, Uri: prefix("/gw")}}, Route: dst("reviews.default.svc.cluster.local")},
			{Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{"./gateway"}, Uri: prefix("/dot")}}, Route: dst("ratings.default.svc.cluster.local")},
			{Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{"other/gateway"}, Uri: prefix("/other")}}, Route: dst("ratings.default.svc.cluster.local")},
		},
	}}}},
	{name: "redirect uri authority and code", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/old")}}, Redirect: &networkingv1.HTTPRedirect{Uri: "/new", Authority: "new.example.com", RedirectCode: 302}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/moved")}}, Redirect: &networkingv1.HTTPRedirect{Uri: "/p", RedirectCode: 308}},
		&networkingv1.HTTPRoute{Redirect: &networkingv1.HTTPRedirect{Authority: "a.example.com", RedirectCode: 307}},
	)},
	{name: "redirect ports and schemes", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/a")}}, Redirect: &networkingv1.HTTPRedirect{Scheme: "https", RedirectPort: &networkingv1.HTTPRedirect_Port{Port: 443}}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/b")}}, Redirect: &networkingv1.HTTPRedirect{RedirectPort: &networkingv1.HTTPRedirect_Port{Port: 8443}}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/c")}}, Redirect: &networkingv1.HTTPRedirect{RedirectPort: &networkingv1.HTTPRedirect_DerivePort{DerivePort: networkingv1.HTTPRedirect_FROM_REQUEST_PORT}}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/d")}}, Redirect: &networkingv1.HTTPRedirect{RedirectPort: &networkingv1.HTTPRedirect_Port{Port: 80}}},
	)},
	{name: "rewrite uri and authority", vss: vs1(&networkingv1.HTTPRoute{
		Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/v1/")}}, Rewrite: &networkingv1.HTTPRewrite{Uri: "/", Authority: "internal.example.com"}, Route: dst("reviews"),
	})},
	{name: "uriRegexRewrite", vss: vs1(&networkingv1.HTTPRoute{
		Rewrite: &networkingv1.HTTPRewrite{UriRegexRewrite: &networkingv1.RegexRewrite{Match: "^/service/([^/]+)(/.*)$", Rewrite: `\2/instance/\1`}}, Route: dst("reviews"),
	})},
	{name: "header operations and host rewrite by header", vss: vs1(&networkingv1.HTTPRoute{
		Headers: &networkingv1.Headers{
			Request: &networkingv1.Headers_HeaderOperations{
				Set: map[string]string{"x-b": "1", "x-a": "2", "host": "set.example.com", ":path": "/no"},
				Add: map[string]string{"x-c": "3", ":authority": "add.example.com"}, Remove: []string{"x-remove", ":method", "Host"},
			},
			Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-r": "r"}, Add: map[string]string{"x-s": "s"}, Remove: []string{"server"}},
		},
		Route: dst("reviews"),
	})},
	{name: "destination headers, single and weighted", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/one")}}, Route: []*networkingv1.HTTPRouteDestination{{
			Destination: &networkingv1.Destination{Host: "reviews"},
			Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-d": "d", "host": "d.example.com"}},
				Response: &networkingv1.Headers_HeaderOperations{Remove: []string{"x-internal"}}},
		}}},
		&networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{
			{Destination: &networkingv1.Destination{Host: "reviews"}, Weight: 50, Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Add: map[string]string{"x-w": "1", ":authority": "w.example.com"}}}},
			{Destination: &networkingv1.Destination{Host: "ratings"}, Weight: 50, Headers: &networkingv1.Headers{Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-v": "2"}}}},
		}},
	)},
	{name: "timeout", vss: vs1(&networkingv1.HTTPRoute{Timeout: dur(3 * time.Second), Route: dst("reviews")})},
	{name: "retries in full", vss: vs1(&networkingv1.HTTPRoute{Retries: &networkingv1.HTTPRetry{
		Attempts: 4, PerTryTimeout: dur(time.Second), RetryOn: "gateway-error, 503,connect-failure,429,999",
		RetryRemoteLocalities: wrapperspb.Bool(true), RetryIgnorePreviousHosts: wrapperspb.Bool(false), Backoff: dur(50 * time.Millisecond),
	}, Route: dst("reviews")})},
	{name: "retries disabled and retry status codes", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/none")}}, Retries: &networkingv1.HTTPRetry{Attempts: 0}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Retries: &networkingv1.HTTPRetry{Attempts: 1, RetryOn: "retriable-status-codes,502", RetryIgnorePreviousHosts: wrapperspb.Bool(true)}, Route: dst("reviews")},
	)},
	{name: "CORS", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/a")}}, CorsPolicy: &networkingv1.CorsPolicy{
			AllowOrigins: []*networkingv1.StringMatch{exact("https://a.example.com"), regex(`https://.*\.example\.org`), prefix("https://p")},
			AllowMethods: []string{"GET", "POST"}, AllowHeaders: []string{"x-a", "x-b"}, ExposeHeaders: []string{"x-e"},
			MaxAge: dur(24 * time.Hour), AllowCredentials: wrapperspb.Bool(true), UnmatchedPreflights: networkingv1.CorsPolicy_IGNORE,
		}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{CorsPolicy: &networkingv1.CorsPolicy{AllowOrigins: []*networkingv1.StringMatch{exact("*")}}, Route: dst("reviews")},
	)},
	{name: "mirror with percentage", vss: vs1(&networkingv1.HTTPRoute{
		Route: dst("reviews"), Mirror: &networkingv1.Destination{Host: "mirror", Subset: "copy"}, MirrorPercentage: &networkingv1.Percent{Value: 12.5},
	})},
	{name: "mirror default 100 percent, to a two-port service on the listener port", vss: vs1(&networkingv1.HTTPRoute{
		Route: dst("reviews"), Mirror: &networkingv1.Destination{Host: "ratings"},
	})},
	{name: "mirror zero percent mirrors nothing; legacy mirrorPercent", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/z")}}, Route: dst("reviews"), Mirror: &networkingv1.Destination{Host: "mirror"}, MirrorPercentage: &networkingv1.Percent{Value: 0}},
		&networkingv1.HTTPRoute{Route: dst("reviews"), Mirror: &networkingv1.Destination{Host: "mirror"}, MirrorPercent: wrapperspb.UInt32(30)},
	)},
	{name: "mirrors list", vss: vs1(&networkingv1.HTTPRoute{Route: dst("reviews"), Mirrors: []*networkingv1.HTTPMirrorPolicy{
		{Destination: &networkingv1.Destination{Host: "mirror", Port: &networkingv1.PortSelector{Number: 80}}, Percentage: &networkingv1.Percent{Value: 50}},
		{Destination: &networkingv1.Destination{Host: "details.other.svc.cluster.local"}},
		{Destination: &networkingv1.Destination{Host: "ratings"}, Percentage: &networkingv1.Percent{Value: 0}},
	}})},
	{name: "direct responses", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/s")}}, DirectResponse: &networkingv1.HTTPDirectResponse{Status: 503, Body: &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_String_{String_: "unavailable"}}}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/b")}}, DirectResponse: &networkingv1.HTTPDirectResponse{Status: 200, Body: &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_Bytes{Bytes: []byte("ok")}}}},
		&networkingv1.HTTPRoute{DirectResponse: &networkingv1.HTTPDirectResponse{Status: 404}},
	)},
	{name: "fault injection", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/d")}}, Fault: &networkingv1.HTTPFaultInjection{
			Delay: &networkingv1.HTTPFaultInjection_Delay{Percentage: &networkingv1.Percent{Value: 10}, HttpDelayType: &networkingv1.HTTPFaultInjection_Delay_FixedDelay{FixedDelay: dur(5 * time.Second)}},
			Abort: &networkingv1.HTTPFaultInjection_Abort{Percentage: &networkingv1.Percent{Value: 0.1}, ErrorType: &networkingv1.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 503}},
		}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Fault: &networkingv1.HTTPFaultInjection{
			Abort: &networkingv1.HTTPFaultInjection_Abort{Percentage: &networkingv1.Percent{Value: 100}, ErrorType: &networkingv1.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "UNAVAILABLE"}},
		}, Route: dst("reviews")},
	)},
	{name: "two VirtualServices for one host: order, catch-all last", vss: []gwVS{
		{name: "b-first", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwRef},
			Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "a-second", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com", "other.example.com"}, Gateways: []string{gwRef},
			Http: []*networkingv1.HTTPRoute{{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/a")}}, Route: dst("ratings")}}}},
	}},
	{name: "rules after a catch-all are left out", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/a")}, {Uri: prefix("/")}, {Uri: prefix("/never")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Route: dst("ratings")},
	)},
	{name: "exportTo: private elsewhere, exported to the gateway namespace, public", vss: []gwVS{
		{name: "private", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"private.example.com"}, Gateways: []string{gwRef}, ExportTo: []string{"."}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "exported", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"exported.example.com"}, Gateways: []string{gwRef}, ExportTo: []string{"istio-system"}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "none", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"none.example.com"}, Gateways: []string{gwRef}, ExportTo: []string{"~"}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "local", ns: "istio-system", spec: &networkingv1.VirtualService{Hosts: []string{"local.example.com", "exported.example.com"}, Gateways: []string{"gateway"}, ExportTo: []string{"."}, Http: []*networkingv1.HTTPRoute{{Route: dst("ratings.default.svc.cluster.local")}}}},
	}},
	{name: "server host namespaces", servers: []*networkingv1.Server{httpServer(80, "default/a.example.com", "*/b.example.com", "./c.example.com", "other/d.example.com")}, vss: []gwVS{
		{name: "d", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "s", ns: "istio-system", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com", "c.example.com"}, Gateways: []string{"gateway"}, Http: []*networkingv1.HTTPRoute{{Route: dst("ratings.default.svc.cluster.local")}}}},
		{name: "o", ns: "other", spec: &networkingv1.VirtualService{Hosts: []string{"d.example.com", "b.example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Route: dst("details")}}}},
	}},
	{name: "wildcard host intersection and collapse", servers: []*networkingv1.Server{httpServer(80, "*.example.com", "Upper.Example.org")}, vss: []gwVS{
		{name: "w", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com", "*.b.example.com", "*", "other.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "x", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"*.example.com", "Upper.Example.org"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/x")}}, Route: dst("ratings")}}}},
	}},
	{name: "httpsRedirect with and without a VirtualService", servers: []*networkingv1.Server{
		{Port: &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"example.com", "noroute.example.com"}, Tls: &networkingv1.ServerTLSSettings{HttpsRedirect: true}},
	}, vss: vs1(&networkingv1.HTTPRoute{Route: dst("reviews")})},
	{name: "blackhole when no VirtualService binds", vss: []gwVS{
		{name: "mesh-only", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "other-gateway", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{"default/gateway"}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
		{name: "wrong-port", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Match: []*networkingv1.HTTPMatchRequest{{Port: 81}}, Route: dst("reviews")}}}},
	}},
	{name: "consistent hash from the DestinationRule", drs: []*networkingv1.DestinationRule{
		{Host: "reviews", TrafficPolicy: &networkingv1.TrafficPolicy{LoadBalancer: &networkingv1.LoadBalancerSettings{LbPolicy: &networkingv1.LoadBalancerSettings_ConsistentHash{
			ConsistentHash: &networkingv1.LoadBalancerSettings_ConsistentHashLB{HashKey: &networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}},
		}}}, Subsets: []*networkingv1.Subset{{Name: "v1", Labels: map[string]string{"v": "1"}, TrafficPolicy: &networkingv1.TrafficPolicy{LoadBalancer: &networkingv1.LoadBalancerSettings{LbPolicy: &networkingv1.LoadBalancerSettings_ConsistentHash{
			ConsistentHash: &networkingv1.LoadBalancerSettings_ConsistentHashLB{HashKey: &networkingv1.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true}},
		}}}}}},
	}, vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/one")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{
			{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v1"}, Weight: 50},
			{Destination: &networkingv1.Destination{Host: "ratings"}, Weight: 50},
		}},
	)},
	{name: "HTTPS server: redirect port defaults to https", servers: []*networkingv1.Server{httpsServer(443, "https", "example.com")}, vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/a")}}, Redirect: &networkingv1.HTTPRedirect{RedirectPort: &networkingv1.HTTPRedirect_Port{Port: 443}}},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/b")}}, Redirect: &networkingv1.HTTPRedirect{RedirectPort: &networkingv1.HTTPRedirect_DerivePort{DerivePort: networkingv1.HTTPRedirect_FROM_REQUEST_PORT}}},
		&networkingv1.HTTPRoute{Route: dst("reviews")},
	)},
	{name: "two servers share http.80; an HTTPS server has its own", servers: []*networkingv1.Server{
		httpServer(80, "a.example.com"), httpServer(80, "b.example.com"), httpsServer(443, "https-b", "b.example.com"),
	}, vss: []gwVS{
		{name: "ab", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com", "b.example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
	}},
	{name: "legacy gateway reference name.namespace", vss: []gwVS{{name: "legacy", ns: "default", spec: &networkingv1.VirtualService{
		Hosts: []string{"example.com"}, Gateways: []string{"gateway.istio-system.svc.cluster.local"}, Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}},
	}}}},
	{name: "sourceNamespace and sourceLabels against the gateway pod", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{SourceNamespace: "istio-system", Uri: prefix("/ns")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{SourceNamespace: "default", Uri: prefix("/other-ns")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{SourceLabels: map[string]string{"istio": "ingressgateway"}, Uri: prefix("/labels")}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "other"}, Uri: prefix("/other-labels")}}, Route: dst("reviews")},
	)},
	{name: "JWT claims in headers and withoutHeaders", vss: vs1(
		&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{
			Headers: map[string]*networkingv1.StringMatch{
				"@request.auth.claims.group": exact("admin"), "@request.auth.claims[org][unit]": prefix("eng"), "x-h": exact("1"),
			},
			WithoutHeaders: map[string]*networkingv1.StringMatch{"@request.auth.claims[banned]": regex("true|yes")},
		}}, Route: dst("reviews")},
		&networkingv1.HTTPRoute{DirectResponse: &networkingv1.HTTPDirectResponse{Status: 403}},
	)},
	{name: "delegation: merged matches, names and inherited fields", vss: []gwVS{
		{name: "root", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{
			{Name: "team", Match: []*networkingv1.HTTPMatchRequest{{Name: "m", Uri: prefix("/team"), Headers: map[string]*networkingv1.StringMatch{"x-a": exact("1")}}, {Uri: exact("/team/x")}},
				Delegate: &networkingv1.Delegate{Name: "team", Namespace: "other"}, Timeout: dur(7 * time.Second),
				Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-root": "1"}}}},
			{Name: "local", Delegate: &networkingv1.Delegate{Name: "local"}},
			{Route: dst("reviews")},
		}}},
		{name: "team", ns: "other", spec: &networkingv1.VirtualService{Http: []*networkingv1.HTTPRoute{
			{Name: "a", Match: []*networkingv1.HTTPMatchRequest{{Name: "n", Uri: prefix("/team/a"), QueryParams: map[string]*networkingv1.StringMatch{"q": exact("1")}}}, Route: dst("details")},
			{Name: "x", Match: []*networkingv1.HTTPMatchRequest{{Uri: exact("/team/x")}}, Route: dst("details"), Timeout: dur(time.Second)},
			{Name: "conflict", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/elsewhere")}}, Route: dst("details")},
			{Match: []*networkingv1.HTTPMatchRequest{{Method: exact("GET")}}, Route: dst("details"), Mirror: &networkingv1.Destination{Host: "mirror.default.svc.cluster.local"}},
		}}},
		{name: "local", ns: "default", spec: &networkingv1.VirtualService{Http: []*networkingv1.HTTPRoute{
			{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/local")}}, Route: dst("ratings")},
		}}},
	}},
	{name: "delegation: missing and unexported delegates leave their rule out", vss: []gwVS{
		{name: "root", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwRef}, Http: []*networkingv1.HTTPRoute{
			{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/a")}}, Delegate: &networkingv1.Delegate{Name: "missing"}},
			{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/b")}}, Delegate: &networkingv1.Delegate{Name: "private", Namespace: "other"}},
			{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/c")}}, Delegate: &networkingv1.Delegate{Name: "exported", Namespace: "other"}},
			{Route: dst("reviews")},
		}}},
		{name: "private", ns: "other", spec: &networkingv1.VirtualService{ExportTo: []string{"."}, Http: []*networkingv1.HTTPRoute{{Route: dst("details")}}}},
		{name: "exported", ns: "other", spec: &networkingv1.VirtualService{ExportTo: []string{"default"}, Http: []*networkingv1.HTTPRoute{{Route: dst("details")}}}},
	}},
	{name: "mesh defaults: retry policy and VirtualService exportTo",
		opts: routes.Options{DefaultRetry: &networkingv1.HTTPRetry{Attempts: 5, RetryOn: "reset,503"}, DefaultExportTo: []string{"."}},
		vss: []gwVS{
			{name: "local", ns: "istio-system", spec: &networkingv1.VirtualService{Hosts: []string{"local.example.com"}, Gateways: []string{"gateway"},
				Http: []*networkingv1.HTTPRoute{{Route: dst("reviews.default.svc.cluster.local")}, {Route: dst("ratings.default.svc.cluster.local"), Retries: &networkingv1.HTTPRetry{Attempts: 1}}}}},
			{name: "elsewhere", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"elsewhere.example.com"}, Gateways: []string{gwRef},
				Http: []*networkingv1.HTTPRoute{{Route: dst("reviews")}}}},
			{name: "exported", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"exported.example.com"}, Gateways: []string{gwRef}, ExportTo: []string{"*"},
				Http: []*networkingv1.HTTPRoute{{Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/r")}}, Route: dst("reviews")}, {Route: dst("ratings")}}}},
		}},
}
