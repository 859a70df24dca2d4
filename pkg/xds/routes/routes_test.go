package routes

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

const gwNs = "istio-system"

func gateway(servers ...*networkingv1.Server) *model.Gateway {
	return &model.Gateway{Meta: model.Meta{Name: "gw", Namespace: gwNs}, Spec: &networkingv1.Gateway{Servers: servers}}
}

func httpServer(hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{Port: &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: hosts}
}

func vsOf(name, ns string, spec *networkingv1.VirtualService) *model.VirtualService {
	return &model.VirtualService{Meta: model.Meta{Name: name, Namespace: ns}, Spec: spec}
}

func snapshot(gw *model.Gateway, vss ...*model.VirtualService) *model.Snapshot {
	return model.Build("1", model.Options{}, model.Resources{
		Services: []*model.Service{
			{Meta: model.Meta{Name: "reviews", Namespace: "default"}, Ports: []model.Port{{Name: "http", Port: 9080}}},
			{Meta: model.Meta{Name: "ratings", Namespace: "default"}, Ports: []model.Port{{Name: "a", Port: 80}, {Name: "b", Port: 81}}},
		},
		Gateways:        []*model.Gateway{gw},
		VirtualServices: vss,
	})
}

func to(host string) []*networkingv1.HTTPRouteDestination {
	return []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: host}}}
}

func regexMatch(re string) []*networkingv1.HTTPMatchRequest {
	return []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: re}}}}
}

// bound is a VirtualService "vs" in default for example.com on the gateway.
func bound(rules ...*networkingv1.HTTPRoute) *model.VirtualService {
	return vsOf("vs", "default", &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwNs + "/gw"}, Http: rules})
}

func vhosts(t *testing.T, vss ...*model.VirtualService) ([]*routev3.VirtualHost, []Problem) {
	t.Helper()
	gw := gateway(httpServer("*"))
	out, problems := GatewayVirtualHosts(snapshot(gw, vss...), gw, gw.Spec.Servers[0], gwNs)
	for _, vh := range out {
		if err := vh.ValidateAll(); err != nil {
			t.Fatalf("virtual host %s is invalid: %v", vh.GetName(), err)
		}
	}
	return out, problems
}

func names(vhs []*routev3.VirtualHost) string {
	var out []string
	for _, vh := range vhs {
		out = append(out, vh.GetName()+"="+strings.Join(vh.GetDomains(), ","))
	}
	return strings.Join(out, " ")
}

func TestRefusedVirtualServicesAreLeftOutWholeAndReported(t *testing.T) {
	ok := &networkingv1.HTTPRoute{Route: to("reviews")}
	for name, rule := range map[string]*networkingv1.HTTPRoute{
		"an invalid regex":                {Match: regexMatch("(unclosed"), Route: to("reviews")},
		"a regex longer than 1024":        {Match: regexMatch(strings.Repeat("a", 1025)), Route: to("reviews")},
		"a regex with a huge program":     {Match: regexMatch("(" + strings.Repeat("[a-z]{1,100}", 10) + "){1,100}"), Route: to("reviews")},
		"a header regex Envoy refuses":    {Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{"x": {MatchType: &networkingv1.StringMatch_Regex{Regex: "a**"}}}}}, Route: to("reviews")},
		"a rewrite regex Envoy refuses":   {Rewrite: &networkingv1.HTTPRewrite{UriRegexRewrite: &networkingv1.RegexRewrite{Match: "[", Rewrite: "/"}}, Route: to("reviews")},
		"a JWT claim match without value": {Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{"@request.auth.claims.group": {}}}}, Route: to("reviews")},
		"an unsupported redirect code":    {Redirect: &networkingv1.HTTPRedirect{Uri: "/x", RedirectCode: 399}},
		"no destination":                  {},
		"only zero weights":               {Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "a"}}, {Destination: &networkingv1.Destination{Host: "b"}}}},
		"an invalid header name":          {Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{"bad header\n": {}}}}, Route: to("reviews")},
		"an empty header prefix":          {Match: []*networkingv1.HTTPMatchRequest{{Headers: map[string]*networkingv1.StringMatch{"x": {MatchType: &networkingv1.StringMatch_Prefix{}}}}}, Route: to("reviews")},
	} {
		t.Run(name, func(t *testing.T) {
			// The refused rule comes after a good one: the whole
			// VirtualService is still left out, never sent in part.
			bad := bound(&networkingv1.HTTPRoute{Match: regexMatch("/ok.*"), Route: to("reviews")}, rule, ok)
			vhs, problems := vhosts(t, bad)
			if len(problems) != 1 || problems[0].Name != "vs" || problems[0].Kind != "VirtualService" {
				t.Fatalf("problems %v, want one about default/vs", problems)
			}
			if names(vhs) != "blackhole:80=*" || len(vhs[0].GetRoutes()) != 0 {
				t.Errorf("virtual hosts %s, want only the blackhole", names(vhs))
			}
			t.Logf("reported: %s", problems[0])
		})
	}
}

func TestTooManyHostsIsReported(t *testing.T) {
	hosts := make([]string, 10000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example.com", i)
	}
	big := vsOf("big", "default", &networkingv1.VirtualService{Hosts: hosts, Gateways: []string{gwNs + "/gw"}, Http: []*networkingv1.HTTPRoute{{Route: to("reviews")}}})
	good := vsOf("good", "default", &networkingv1.VirtualService{Hosts: []string{"good.example.com"}, Gateways: []string{gwNs + "/gw"}, Http: []*networkingv1.HTTPRoute{{Route: to("reviews")}}})
	vhs, problems := vhosts(t, big, good)
	if len(problems) != 1 || problems[0].Name != "big" || !strings.Contains(problems[0].Reason, "10000 hosts") {
		t.Fatalf("problems %v", problems)
	}
	if names(vhs) != "good.example.com:80=good.example.com" {
		t.Errorf("virtual hosts %s; the other VirtualService must keep serving", names(vhs))
	}
}

func TestBindingAndVisibility(t *testing.T) {
	rule := []*networkingv1.HTTPRoute{{Route: to("reviews")}}
	vss := []*model.VirtualService{
		vsOf("short", gwNs, &networkingv1.VirtualService{Hosts: []string{"short.example.com"}, Gateways: []string{"gw"}, Http: rule}),
		vsOf("dot", gwNs, &networkingv1.VirtualService{Hosts: []string{"dot.example.com"}, Gateways: []string{"./gw"}, Http: rule}),
		vsOf("legacy", "default", &networkingv1.VirtualService{Hosts: []string{"legacy.example.com"}, Gateways: []string{"gw.istio-system.svc.cluster.local"}, Http: rule}),
		vsOf("wrongns", "default", &networkingv1.VirtualService{Hosts: []string{"wrongns.example.com"}, Gateways: []string{"gw"}, Http: rule}),
		vsOf("meshonly", "default", &networkingv1.VirtualService{Hosts: []string{"mesh.example.com"}, Http: rule}),
		vsOf("private", "default", &networkingv1.VirtualService{Hosts: []string{"private.example.com"}, Gateways: []string{gwNs + "/gw"}, ExportTo: []string{"."}, Http: rule}),
		vsOf("exported", "default", &networkingv1.VirtualService{Hosts: []string{"exported.example.com"}, Gateways: []string{gwNs + "/gw"}, ExportTo: []string{"other", gwNs}, Http: rule}),
		vsOf("hidden", "default", &networkingv1.VirtualService{Hosts: []string{"hidden.example.com"}, Gateways: []string{gwNs + "/gw"}, ExportTo: []string{"~"}, Http: rule}),
	}
	vhs, problems := vhosts(t, vss...)
	if len(problems) != 0 {
		t.Fatalf("problems %v", problems)
	}
	want := "dot.example.com:80=dot.example.com exported.example.com:80=exported.example.com legacy.example.com:80=legacy.example.com short.example.com:80=short.example.com"
	// Identical routes from different VirtualServices are different
	// objects in Istio's generator too: no collapse across them.
	if got := names(vhs); got != want {
		t.Errorf("virtual hosts\n got %s\nwant %s", got, want)
	}
}

func TestServerHostNamespaces(t *testing.T) {
	rule := []*networkingv1.HTTPRoute{{Route: to("reviews")}}
	gw := gateway(httpServer("default/a.example.com", "./b.example.com", "*/c.example.com", "*.d.example.com"))
	vss := []*model.VirtualService{
		vsOf("d", "default", &networkingv1.VirtualService{Hosts: []string{"a.example.com", "b.example.com", "c.example.com", "x.d.example.com"}, Gateways: []string{gwNs + "/gw"}, Http: rule}),
		vsOf("o", "other", &networkingv1.VirtualService{Hosts: []string{"a.example.com", "*.example.com"}, Gateways: []string{gwNs + "/gw"}, Http: rule}),
	}
	vhs, _ := GatewayVirtualHosts(snapshot(gw, vss...), gw, gw.Spec.Servers[0], gwNs)
	// default may claim a and c (and x.d); other only c and *.d (its
	// *.example.com narrowed to the server's *.d.example.com); nobody in
	// istio-system claims b.
	// Hosts with the same routes share the virtual host of the most
	// specific (longest) one; virtual hosts are sorted by name.
	want := "*.d.example.com:80=*.d.example.com c.example.com:80=c.example.com x.d.example.com:80=x.d.example.com,a.example.com"
	if got := names(vhs); got != want {
		t.Errorf("virtual hosts\n got %s\nwant %s", got, want)
	}
}

func TestHTTPSRedirect(t *testing.T) {
	srv := httpServer("example.com", "default/other.example.com")
	srv.Tls = &networkingv1.ServerTLSSettings{HttpsRedirect: true}
	gw := gateway(srv)
	vhs, _ := GatewayVirtualHosts(snapshot(gw, bound(&networkingv1.HTTPRoute{Route: to("reviews")})), gw, srv, gwNs)
	if len(vhs) != 2 {
		t.Fatalf("virtual hosts %s", names(vhs))
	}
	for _, vh := range vhs {
		if vh.GetRequireTls() != routev3.VirtualHost_ALL {
			t.Errorf("%s: require_tls %v, want ALL", vh.GetName(), vh.GetRequireTls())
		}
	}
	if got := names(vhs); got != "example.com:80=example.com other.example.com:80=other.example.com" {
		t.Errorf("virtual hosts %s", got)
	}
}

// Mirroring copies requests to another service: exactly the cluster
// named, at exactly the share asked, on exactly the rule that asks.
func TestMirrorIsExact(t *testing.T) {
	vs := bound(
		&networkingv1.HTTPRoute{Match: regexMatch("/plain.*"), Route: to("reviews")},
		&networkingv1.HTTPRoute{Match: regexMatch("/half.*"), Route: to("reviews"),
			Mirror: &networkingv1.Destination{Host: "ratings", Subset: "shadow", Port: &networkingv1.PortSelector{Number: 81}}, MirrorPercentage: &networkingv1.Percent{Value: 50.5}},
		&networkingv1.HTTPRoute{Match: regexMatch("/zero.*"), Route: to("reviews"),
			Mirror: &networkingv1.Destination{Host: "ratings"}, MirrorPercentage: &networkingv1.Percent{}},
		&networkingv1.HTTPRoute{Route: to("reviews"), Mirror: &networkingv1.Destination{Host: "reviews"},
			Mirrors: []*networkingv1.HTTPMirrorPolicy{{Destination: &networkingv1.Destination{Host: "ratings.default.svc.cluster.local"}, Percentage: &networkingv1.Percent{Value: 1}}, {}}},
	)
	vhs, problems := vhosts(t, vs)
	if len(problems) != 0 || len(vhs) != 1 {
		t.Fatalf("virtual hosts %s, problems %v", names(vhs), problems)
	}
	type mirror struct {
		cluster string
		num     uint32
		den     typev3.FractionalPercent_DenominatorType
	}
	want := [][]mirror{
		nil,
		{{"outbound|81|shadow|ratings.default.svc.cluster.local", 505000, typev3.FractionalPercent_MILLION}},
		nil,
		{{"outbound|9080||reviews.default.svc.cluster.local", 100, typev3.FractionalPercent_HUNDRED}, {"outbound|80||ratings.default.svc.cluster.local", 10000, typev3.FractionalPercent_MILLION}},
	}
	routes := vhs[0].GetRoutes()
	if len(routes) != len(want) {
		t.Fatalf("%d routes, want %d", len(routes), len(want))
	}
	for i, r := range routes {
		var got []mirror
		for _, m := range r.GetRoute().GetRequestMirrorPolicies() {
			f := m.GetRuntimeFraction().GetDefaultValue()
			got = append(got, mirror{m.GetCluster(), f.GetNumerator(), f.GetDenominator()})
			if m.GetRuntimeFraction().GetRuntimeKey() != "" || !m.GetDisableShadowHostSuffixAppend() || m.GetTraceSampled().GetValue() {
				t.Errorf("route %d: mirror %v", i, m)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("route %d: mirrors %v, want %v", i, got, want[i])
		}
	}
}

func TestDestinations(t *testing.T) {
	vs := bound(&networkingv1.HTTPRoute{Route: []*networkingv1.HTTPRouteDestination{
		{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v1"}, Weight: 90},
		{Destination: &networkingv1.Destination{Host: "ratings"}, Weight: 10},
		{Destination: &networkingv1.Destination{Host: "ghost.example.com", Port: &networkingv1.PortSelector{Number: 7}}, Weight: 0},
	}})
	vhs, _ := vhosts(t, vs)
	got := vhs[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
	want := "outbound|9080|v1|reviews.default.svc.cluster.local=90 outbound|80||ratings.default.svc.cluster.local=10"
	var s []string
	for _, c := range got {
		s = append(s, fmt.Sprintf("%s=%d", c.GetName(), c.GetWeight().GetValue()))
	}
	if strings.Join(s, " ") != want {
		t.Errorf("weighted clusters %v, want %s", s, want)
	}
}

func TestTLSAndTCPRoutes(t *testing.T) {
	pass := &networkingv1.Server{Port: &networkingv1.Port{Number: 443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"*.example.com"},
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_PASSTHROUGH}}
	tcp := &networkingv1.Server{Port: &networkingv1.Port{Number: 31400, Name: "tcp", Protocol: "TCP"}, Hosts: []string{"*"}}
	gw := gateway(pass, tcp)
	tlsRoute := func(port uint32, sni ...string) *networkingv1.TLSRoute {
		return &networkingv1.TLSRoute{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: sni, Port: port}},
			Route: []*networkingv1.RouteDestination{{Destination: &networkingv1.Destination{Host: "reviews"}}}}
	}
	vss := []*model.VirtualService{
		vsOf("a", "default", &networkingv1.VirtualService{Hosts: []string{"a.example.com", "b.example.com"}, Gateways: []string{gwNs + "/gw"},
			Tls: []*networkingv1.TLSRoute{tlsRoute(0, "a.example.com"), tlsRoute(8443, "c.example.com"), tlsRoute(443, "b.example.com")}}),
		vsOf("dup", "default", &networkingv1.VirtualService{Hosts: []string{"a.example.com"}, Gateways: []string{gwNs + "/gw"},
			Tls: []*networkingv1.TLSRoute{tlsRoute(0, "a.example.com")}}),
		vsOf("tcp", "default", &networkingv1.VirtualService{Hosts: []string{"*"}, Gateways: []string{gwNs + "/gw"},
			Tcp: []*networkingv1.TCPRoute{
				{Match: []*networkingv1.L4MatchAttributes{{Port: 9999}}, Route: []*networkingv1.RouteDestination{{Destination: &networkingv1.Destination{Host: "ratings"}}}},
				{Match: []*networkingv1.L4MatchAttributes{{Port: 31400}}, Route: []*networkingv1.RouteDestination{
					{Destination: &networkingv1.Destination{Host: "ratings"}, Weight: 30}, {Destination: &networkingv1.Destination{Host: "reviews"}, Weight: 70}}},
			}}),
	}
	snap := snapshot(gw, vss...)
	claimed := map[string]bool{}
	got, problems := Options{}.GatewayTLSRoutes(snap, gw, pass, gwNs, claimed)
	if len(got) != 2 || fmt.Sprint(got[0].SNIHosts, got[1].SNIHosts) != "[a.example.com] [b.example.com]" {
		t.Fatalf("tls routes %+v", got)
	}
	if got[0].Destinations[0].Cluster != "outbound|9080||reviews.default.svc.cluster.local" {
		t.Errorf("destinations %+v", got[0].Destinations)
	}
	if len(problems) != 1 || problems[0].Name != "dup" {
		t.Errorf("problems %v, want the duplicate SNI of dup", problems)
	}
	// ratings has two ports: without one, the destination takes the
	// server's.
	r, _ := Options{}.GatewayTCPRoutes(snap, gw, tcp, gwNs)
	if r == nil || fmt.Sprint(r.Destinations) != "[{outbound|31400||ratings.default.svc.cluster.local 30} {outbound|9080||reviews.default.svc.cluster.local 70}]" {
		t.Errorf("tcp route %+v", r)
	}
}

func TestRegexLimits(t *testing.T) {
	for re, ok := range map[string]bool{
		"/api/v[0-9]+/.*": true,
		"(a":              false,
		`\C`:              false,
		strings.Repeat("x", policy.MaxRegexLength):   true,
		strings.Repeat("x", policy.MaxRegexLength+1): false,
		"(?:[a-z0-9]{1,500}){1,100}":                 false,
		"a{1001}":                                    false,
	} {
		if err := checkRegex(re); (err == nil) != ok {
			t.Errorf("checkRegex(%.40q) = %v, want ok=%v", re, err, ok)
		}
	}
}

func TestTranslationDoesNotChangeItsInput(t *testing.T) {
	vs := bound(&networkingv1.HTTPRoute{Match: regexMatch("/a.*"), Route: to("reviews"),
		Headers: &networkingv1.Headers{Request: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x": "1"}}}})
	before := proto.Clone(vs.Spec)
	vhosts(t, vs)
	vhosts(t, vs)
	if !proto.Equal(before, vs.Spec) {
		t.Error("the VirtualService changed")
	}
}

func TestHostEnvoyRefusesIsLeftOut(t *testing.T) {
	vs := vsOf("vs", "default", &networkingv1.VirtualService{Hosts: []string{"good.example.com", "bad\n.example.com"}, Gateways: []string{gwNs + "/gw"},
		Http: []*networkingv1.HTTPRoute{{Match: regexMatch("/x.*"), Route: to("reviews")}}})
	// Another VirtualService for the bad host does not bring it back.
	other := vsOf("other", "default", &networkingv1.VirtualService{Hosts: []string{"bad\n.example.com"}, Gateways: []string{gwNs + "/gw"},
		Http: []*networkingv1.HTTPRoute{{Route: to("ratings")}}})
	vhs, problems := vhosts(t, vs, other)
	if got := names(vhs); got != "good.example.com:80=good.example.com" {
		t.Errorf("virtual hosts %q", got)
	}
	if len(problems) != 2 || problems[0].Name != "other" || problems[1].Name != "vs" {
		t.Errorf("problems %v", problems)
	}
}

func TestJWTClaimMatches(t *testing.T) {
	admin := &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: "admin"}}
	vs := bound(&networkingv1.HTTPRoute{Match: []*networkingv1.HTTPMatchRequest{{
		Headers:        map[string]*networkingv1.StringMatch{"@request.auth.claims.group": admin, "@Request.Auth.Claims[org][unit]": admin},
		WithoutHeaders: map[string]*networkingv1.StringMatch{"@request.auth.claims[banned]": admin},
	}}, Route: to("reviews")}, &networkingv1.HTTPRoute{DirectResponse: &networkingv1.HTTPDirectResponse{Status: 403}})
	vhs, problems := vhosts(t, vs)
	if len(problems) != 0 {
		t.Fatalf("problems %v", problems)
	}
	r := vhs[0].GetRoutes()[0]
	if isCatchAll(r) {
		t.Fatal("a route matching claims is taken for a catch-all")
	}
	var got []string
	for _, md := range r.GetMatch().GetDynamicMetadata() {
		var path []string
		for _, seg := range md.GetPath() {
			path = append(path, seg.GetKey())
		}
		or := md.GetValue().GetOrMatch().GetValueMatchers()
		got = append(got, fmt.Sprintf("%s %v invert=%v list=%q value=%q", md.GetFilter(), path, md.GetInvert(),
			or[0].GetListMatch().GetOneOf().GetStringMatch().GetExact(), or[1].GetStringMatch().GetExact()))
	}
	want := []string{
		`envoy.filters.http.jwt_authn [payload org unit] invert=false list="admin" value="admin"`,
		`envoy.filters.http.jwt_authn [payload group] invert=false list="admin" value="admin"`,
		`envoy.filters.http.jwt_authn [payload banned] invert=true list="admin" value="admin"`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dynamic metadata\n got %q\nwant %q", got, want)
	}
	if len(r.GetMatch().GetHeaders()) != 0 {
		t.Errorf("claims matched as headers: %v", r.GetMatch().GetHeaders())
	}
}

func TestDelegation(t *testing.T) {
	root := func(d *networkingv1.Delegate) *model.VirtualService {
		return vsOf("root", "default", &networkingv1.VirtualService{Hosts: []string{"example.com"}, Gateways: []string{gwNs + "/gw"},
			Http: []*networkingv1.HTTPRoute{
				{Name: "r", Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/team"}}}}, Delegate: d},
				{Route: to("ratings")},
			}})
	}
	delegate := func(name, ns string, exportTo []string, rules ...*networkingv1.HTTPRoute) *model.VirtualService {
		return vsOf(name, ns, &networkingv1.VirtualService{ExportTo: exportTo, Http: rules})
	}
	prefixMatch := func(p string) []*networkingv1.HTTPMatchRequest {
		return []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: p}}}}
	}
	team := delegate("team", "teams", nil,
		&networkingv1.HTTPRoute{Name: "a", Match: prefixMatch("/team/a"), Route: to("reviews")},
		&networkingv1.HTTPRoute{Name: "outside", Match: prefixMatch("/other"), Route: to("reviews")},
	)
	for name, c := range map[string]struct {
		vss      []*model.VirtualService
		routes   string // name=cluster of each route
		problems int
	}{
		"rules merged, short names in the delegate's namespace": {
			vss:      []*model.VirtualService{root(&networkingv1.Delegate{Name: "team", Namespace: "teams"}), team},
			routes:   "r-a=outbound|80||reviews.teams.svc.cluster.local =outbound|80||ratings.default.svc.cluster.local", // no such service: the listener port
			problems: 1,                                                                                                  // the rule matching /other, outside /team
		},
		"missing delegate: its rule left out, reported": {
			vss:      []*model.VirtualService{root(&networkingv1.Delegate{Name: "nope"})},
			routes:   "=outbound|80||ratings.default.svc.cluster.local",
			problems: 1,
		},
		"delegate not exported to the root's namespace": {
			vss:      []*model.VirtualService{root(&networkingv1.Delegate{Name: "team", Namespace: "teams"}), delegate("team", "teams", []string{"."}, &networkingv1.HTTPRoute{Route: to("reviews")})},
			routes:   "=outbound|80||ratings.default.svc.cluster.local",
			problems: 1,
		},
		"a delegate's own delegation refuses the root": {
			vss: []*model.VirtualService{root(&networkingv1.Delegate{Name: "d1"}),
				delegate("d1", "default", nil, &networkingv1.HTTPRoute{Delegate: &networkingv1.Delegate{Name: "d2"}}),
				delegate("d2", "default", nil, &networkingv1.HTTPRoute{Route: to("reviews")})},
			routes:   "",
			problems: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			vhs, problems := vhosts(t, c.vss...)
			var got []string
			for _, vh := range vhs {
				for _, r := range vh.GetRoutes() {
					got = append(got, r.GetName()+"="+r.GetRoute().GetCluster())
				}
			}
			if strings.Join(got, " ") != c.routes {
				t.Errorf("routes %q, want %q", strings.Join(got, " "), c.routes)
			}
			if len(problems) != c.problems {
				t.Errorf("problems %v, want %d", problems, c.problems)
			}
		})
	}
}

// Many overlapping hosts on both sides stay cheap: the intersection is
// linear in the pairs, not in their square.
func TestManyOverlappingHosts(t *testing.T) {
	var server, hosts []string
	suffix := ".example.com"
	for i := range MaxHosts {
		server = append(server, "*"+suffix)
		suffix = fmt.Sprintf(".l%d", i) + suffix
	}
	// Every host is under every wildcard of the server.
	for i := range MaxHosts {
		hosts = append(hosts, fmt.Sprintf("h%d", i)+suffix)
	}
	got := intersect(server, hosts)
	if len(got) != MaxHosts {
		t.Errorf("%d hosts in the intersection, want %d", len(got), MaxHosts)
	}
}

func TestServerWithTooManyHostsGetsNoRoutes(t *testing.T) {
	hosts := make([]string, MaxHosts+1)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example.com", i)
	}
	gw := gateway(httpServer(hosts...))
	vhs, problems := GatewayVirtualHosts(snapshot(gw, bound(&networkingv1.HTTPRoute{Route: to("reviews")})), gw, gw.Spec.Servers[0], gwNs)
	if names(vhs) != "blackhole:80=*" || len(problems) != 1 || problems[0].Kind != "Gateway" {
		t.Errorf("virtual hosts %s, problems %v", names(vhs), problems)
	}
	if r, problems := GatewayTCPRoutes(snapshot(gw), gw, gw.Spec.Servers[0], gwNs); r != nil || len(problems) != 1 {
		t.Errorf("tcp route %v, problems %v", r, problems)
	}
}

// For sidecars ("mesh"), a match's gateways and source labels and
// namespace select the rules that apply to the proxy.
func TestMeshScope(t *testing.T) {
	vs := vsOf("vs", "default", &networkingv1.VirtualService{Hosts: []string{"reviews"}, Http: []*networkingv1.HTTPRoute{
		{Name: "gw-only", Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{gwNs + "/gw"}}}, Route: to("ratings")},
		{Name: "labelled", Match: []*networkingv1.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "a"}, SourceNamespace: "default"}}, Route: to("ratings")},
		{Name: "mesh", Match: []*networkingv1.HTTPMatchRequest{{Gateways: []string{"mesh"}, Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/m"}}}}, Route: to("reviews")},
	}})
	snap := snapshot(gateway(), vs)
	for _, c := range []struct {
		proxy Proxy
		want  string
	}{
		{Proxy{Namespace: "default", Labels: map[string]string{"app": "a"}}, "labelled"}, // a catch-all: later rules never apply
		{Proxy{Namespace: "other", Labels: map[string]string{"app": "a"}}, "mesh"},
		{Proxy{Namespace: "default", Labels: map[string]string{"app": "b"}}, "mesh"},
	} {
		proxy, want := c.proxy, c.want
		routes, err := Options{}.HTTPRoutes(snap, vs, Scope{Port: 9080, Gateway: Mesh, Proxy: proxy})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range routes {
			got = append(got, r.GetName())
		}
		if strings.Join(got, " ") != want {
			t.Errorf("proxy %v: routes %v, want %s", proxy, got, want)
		}
	}
	// Through the gateway, the rule bound to it applies, and the one
	// for "mesh" not.
	routes, err := Options{}.HTTPRoutes(snap, vs, Scope{Port: 9080, Gateway: GatewayName(gateway()), Proxy: Proxy{Namespace: "x"}})
	if err != nil || len(routes) != 1 || routes[0].GetName() != "gw-only" {
		t.Errorf("gateway scope: %v, %v", routes, err)
	}
	if _, err := (Options{}).HTTPRoutes(snap, vs, Scope{Port: 9080, Gateway: "other/gw", Proxy: Proxy{Namespace: "x"}}); !errors.Is(err, ErrNoRoutes) {
		t.Errorf("another gateway: %v, want ErrNoRoutes", err)
	}
}
