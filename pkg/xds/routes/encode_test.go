package routes

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// checkEncoding fails t unless MarshalRoute gives r as proto's
// deterministic marshalling does (or both refuse it), and
// AppendVirtualHost a virtual host holding it likewise.
func checkEncoding(t *testing.T, r *routev3.Route) {
	t.Helper()
	want, wantErr := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	got, err := MarshalRoute(r)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("MarshalRoute error %v, proto's %v, for %v", err, wantErr, r)
	}
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("MarshalRoute differs from proto's for %v:\n got %x\nwant %x", r, got, want)
	}
	vh := &routev3.VirtualHost{Name: "v:80", Domains: []string{"v", "v.ns"}, Routes: []*routev3.Route{r, r}, IncludeRequestAttemptCount: true}
	rc := &routev3.RouteConfiguration{VirtualHosts: []*routev3.VirtualHost{vh}}
	want, wantErr = proto.MarshalOptions{Deterministic: true}.Marshal(rc)
	got, err = AppendVirtualHost(nil, 2, vh, nil)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("AppendVirtualHost error %v, proto's %v", err, wantErr)
	}
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("AppendVirtualHost differs from proto's for %v:\n got %x\nwant %x", vh, got, want)
	}
}

// TestMarshalRouteMatchesProtoOnRandomRoutes fills routes at random, every
// field of every message type that may be set (those the encoder writes
// itself and those it leaves to proto), and checks each encoding.
func TestMarshalRouteMatchesProtoOnRandomRoutes(t *testing.T) {
	for seed := range uint64(3000) {
		r := &routev3.Route{}
		fill(rand.New(rand.NewPCG(seed, 7)), r.ProtoReflect(), 0)
		checkEncoding(t, r)
	}
}

// TestMarshalRouteWritesEveryField sets one field at a time, of every
// message type the encoder writes itself, on a route that reaches it,
// and checks the encoding: a field the encoder forgot, or a field a new
// API version added, fails here.
func TestMarshalRouteWritesEveryField(t *testing.T) {
	paths := map[string]func(*routev3.Route) protoreflect.Message{
		"Route": func(r *routev3.Route) protoreflect.Message { return r.ProtoReflect() },
		"RouteMatch": func(r *routev3.Route) protoreflect.Message {
			r.Match = &routev3.RouteMatch{}
			return r.Match.ProtoReflect()
		},
		"HeaderMatcher": func(r *routev3.Route) protoreflect.Message {
			h := &routev3.HeaderMatcher{}
			r.Match = &routev3.RouteMatch{Headers: []*routev3.HeaderMatcher{h}}
			return h.ProtoReflect()
		},
		"QueryParameterMatcher": func(r *routev3.Route) protoreflect.Message {
			q := &routev3.QueryParameterMatcher{}
			r.Match = &routev3.RouteMatch{QueryParameters: []*routev3.QueryParameterMatcher{q}}
			return q.ProtoReflect()
		},
		"RouteAction": func(r *routev3.Route) protoreflect.Message {
			a := &routev3.RouteAction{}
			r.Action = &routev3.Route_Route{Route: a}
			return a.ProtoReflect()
		},
		"RetryPolicy": func(r *routev3.Route) protoreflect.Message {
			p := &routev3.RetryPolicy{}
			r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{RetryPolicy: p}}
			return p.ProtoReflect()
		},
		"WeightedCluster": func(r *routev3.Route) protoreflect.Message {
			w := &routev3.WeightedCluster{}
			r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: w}}}
			return w.ProtoReflect()
		},
		"ClusterWeight": func(r *routev3.Route) protoreflect.Message {
			c := &routev3.WeightedCluster_ClusterWeight{}
			r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
				WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{c}}}}}
			return c.ProtoReflect()
		},
		"RequestMirrorPolicy": func(r *routev3.Route) protoreflect.Message {
			m := &routev3.RouteAction_RequestMirrorPolicy{}
			r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{RequestMirrorPolicies: []*routev3.RouteAction_RequestMirrorPolicy{m}}}
			return m.ProtoReflect()
		},
		"RetryHostPredicate": func(r *routev3.Route) protoreflect.Message {
			h := &routev3.RetryPolicy_RetryHostPredicate{}
			r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{RetryPolicy: &routev3.RetryPolicy{
				RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{h}}}}
			return h.ProtoReflect()
		},
	}
	for name, path := range paths {
		fields := path(&routev3.Route{}).Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			for seed := range uint64(8) {
				r := &routev3.Route{}
				m := path(r)
				rng := rand.New(rand.NewPCG(seed, uint64(fd.Number())))
				setField(rng, m, fd, 1)
				t.Run(name+"."+string(fd.Name()), func(t *testing.T) { checkEncoding(t, r) })
			}
		}
	}
}

// TestMarshalRoutesOfTranslations encodes what the translation makes of
// the VirtualServices the routes tests use.
func TestMarshalRoutesOfTranslations(t *testing.T) {
	n := 0
	for _, spec := range append(fuzzSeeds(), encodeSpecs()...) {
		for _, scope := range []Scope{{Port: 80, Gateway: Mesh}, {Port: 443, Gateway: gwNs + "/gw", TLS: true}} {
			spec := proto.CloneOf(spec)
			spec.Gateways = append(spec.Gateways, gwNs+"/gw", Mesh)
			vs := vsOf("enc", "default", spec)
			rs, err := Options{}.HTTPRoutes(snapshot(gateway(httpServer("*")), vs), vs, scope)
			if err != nil {
				continue
			}
			raw, err := MarshalRoutes(rs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rs {
				want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(raw[i], want) {
					t.Fatalf("route %d of %v differs from proto's", i, spec)
				}
				checkEncoding(t, r)
				n++
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d routes translated", n)
	}
}

// encodeSpecs are VirtualServices using most of what the translation
// makes: weights, header operations, fault and CORS, redirects and
// direct responses, mirrors, retries, rewrites, every kind of match.
func encodeSpecs() []*networkingv1.VirtualService {
	exact := func(v string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: v}}
	}
	prefix := func(v string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: v}}
	}
	regex := func(v string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: v}}
	}
	dst := func(host string, port uint32, weight int32) *networkingv1.HTTPRouteDestination {
		d := &networkingv1.HTTPRouteDestination{Destination: &networkingv1.Destination{Host: host}, Weight: weight}
		if port != 0 {
			d.Destination.Port = &networkingv1.PortSelector{Number: port}
		}
		return d
	}
	ops := &networkingv1.Headers{
		Request:  &networkingv1.Headers_HeaderOperations{Set: map[string]string{"x-a": "1", "Host": "h.example.com"}, Add: map[string]string{"x-b": "2", "x-c": "3"}, Remove: []string{"x-d", ":path"}},
		Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"cache-control": "max-age=60"}, Remove: []string{"server"}},
	}
	return []*networkingv1.VirtualService{
		{Hosts: []string{"a.example.com"}, Http: []*networkingv1.HTTPRoute{
			{Name: "canary", Match: []*networkingv1.HTTPMatchRequest{
				{Name: "m1", Uri: prefix("/api/"), Headers: map[string]*networkingv1.StringMatch{"x-canary": exact("true"), "x-b": prefix("b"), "x-r": regex("[a-z]+"), "x-p": {}},
					WithoutHeaders: map[string]*networkingv1.StringMatch{"x-no": exact("1"), "x-absent": {}}, Method: exact("GET"), Authority: prefix("a"), Scheme: exact("https"),
					QueryParams: map[string]*networkingv1.StringMatch{"q": exact("1"), "p": {}, "r": regex("[0-9]+")}, IgnoreUriCase: true, StatPrefix: "canary"},
				{Uri: exact("/exact"), Headers: map[string]*networkingv1.StringMatch{"@request.auth.claims.group": exact("admin")}}},
				Route:   []*networkingv1.HTTPRouteDestination{dst("reviews", 9080, 90), dst("ratings", 80, 10), dst("zero", 0, 0)},
				Headers: ops, Timeout: durationpb.New(1500 * time.Millisecond),
				Retries: &networkingv1.HTTPRetry{Attempts: 3, PerTryTimeout: durationpb.New(2 * time.Second), RetryOn: "5xx,reset,503,429", RetryRemoteLocalities: wrapperspb.Bool(true)},
				Mirror:  &networkingv1.Destination{Host: "ratings", Port: &networkingv1.PortSelector{Number: 80}}, MirrorPercentage: &networkingv1.Percent{Value: 12.5},
				Mirrors: []*networkingv1.HTTPMirrorPolicy{{Destination: &networkingv1.Destination{Host: "reviews"}, Percentage: &networkingv1.Percent{Value: 1}}},
			},
			{Name: "rewrite", Match: []*networkingv1.HTTPMatchRequest{{Uri: regex("/static/[a-z0-9]+\\.(css|js)")}},
				Route:   []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "reviews"}, Headers: ops}},
				Rewrite: &networkingv1.HTTPRewrite{Uri: "/v2/", Authority: "new.example.com"},
				Fault: &networkingv1.HTTPFaultInjection{
					Delay: &networkingv1.HTTPFaultInjection_Delay{HttpDelayType: &networkingv1.HTTPFaultInjection_Delay_FixedDelay{FixedDelay: durationpb.New(time.Second)}, Percentage: &networkingv1.Percent{Value: 50}},
					Abort: &networkingv1.HTTPFaultInjection_Abort{ErrorType: &networkingv1.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 503}, Percentage: &networkingv1.Percent{Value: 5}}},
				CorsPolicy: &networkingv1.CorsPolicy{AllowOrigins: []*networkingv1.StringMatch{exact("https://a.example.com"), regex("https://.*\\.example\\.com")},
					AllowMethods: []string{"GET", "POST"}, AllowHeaders: []string{"x-a"}, ExposeHeaders: []string{"x-b"}, MaxAge: durationpb.New(time.Hour), AllowCredentials: wrapperspb.Bool(true)},
				Retries: &networkingv1.HTTPRetry{Attempts: 0}},
			{Name: "regex-rewrite", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/re/")}},
				Route:   []*networkingv1.HTTPRouteDestination{dst("reviews", 9080, 0)},
				Rewrite: &networkingv1.HTTPRewrite{UriRegexRewrite: &networkingv1.RegexRewrite{Match: "^/re/(.*)", Rewrite: "/\\1"}}},
			{Name: "redirect", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/old/")}},
				Redirect: &networkingv1.HTTPRedirect{Uri: "/new/", Authority: "b.example.com", RedirectCode: 302, Scheme: "https", RedirectPort: &networkingv1.HTTPRedirect_Port{Port: 8443}}},
			{Name: "redirect2", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/old2/")}},
				Redirect: &networkingv1.HTTPRedirect{PrefixRewrite: "/p/", RedirectPort: &networkingv1.HTTPRedirect_DerivePort{DerivePort: networkingv1.HTTPRedirect_FROM_REQUEST_PORT}}},
			{Name: "direct", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/gone/")}},
				DirectResponse: &networkingv1.HTTPDirectResponse{Status: 410, Body: &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_Bytes{Bytes: []byte{0, 1, 2}}}}},
			{Name: "direct2", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/teapot/")}},
				DirectResponse: &networkingv1.HTTPDirectResponse{Status: 418, Body: &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_String_{String_: "short and stout"}}}},
			{Name: "default", Route: []*networkingv1.HTTPRouteDestination{dst("reviews", 0, 0)}, Timeout: durationpb.New(0)},
		}},
		{Hosts: []string{"b.example.com"}, Http: []*networkingv1.HTTPRoute{
			{Match: []*networkingv1.HTTPMatchRequest{{Port: 80, SourceLabels: map[string]string{"app": "x"}}, {Gateways: []string{"gw"}, Uri: prefix("/gw")}},
				Route: []*networkingv1.HTTPRouteDestination{dst("ratings", 0, 0)}, Retries: &networkingv1.HTTPRetry{Attempts: 2, RetryOn: "gateway-error", RetryIgnorePreviousHosts: wrapperspb.Bool(false), Backoff: durationpb.New(time.Second / 4)}},
			{Route: []*networkingv1.HTTPRouteDestination{dst("ratings", 81, 0)}},
		}},
	}
}

// FuzzMarshalRoute fills a route from the fuzzer's bytes and checks its
// encoding against proto's.
func FuzzMarshalRoute(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1 << 40} {
		f.Add(binary.LittleEndian.AppendUint64(nil, s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, seed []byte, depth uint8) {
		var a, b uint64
		if len(seed) >= 8 {
			a = binary.LittleEndian.Uint64(seed)
		}
		if len(seed) >= 16 {
			b = binary.LittleEndian.Uint64(seed[8:])
		}
		r := &routev3.Route{}
		fill(rand.New(rand.NewPCG(a, b)), r.ProtoReflect(), 4-int(depth%5))
		checkEncoding(t, r)
	})
}

const fillDepth = 5

// fill sets some fields of m at random, nested messages to fillDepth.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if rng.IntN(3) == 0 {
			setField(rng, m, fields.Get(i), depth)
		}
	}
}

// setField sets fd of m to a value of its kind: scalars of every width
// and sign, strings now and then invalid UTF-8, lists and maps of up to
// three, messages filled in turn (empty past fillDepth).
func setField(rng *rand.Rand, m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for range rng.IntN(4) {
			k := scalar(rng, fd.MapKey()).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v := mp.NewValue()
				if fd.MapValue().Message().FullName() == "google.protobuf.Any" {
					fillAny(rng, v.Message())
				} else if depth < fillDepth {
					fill(rng, v.Message(), depth+1)
				}
				mp.Set(k, v)
				continue
			}
			mp.Set(k, scalar(rng, fd.MapValue()))
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		for range 1 + rng.IntN(3) {
			if fd.Kind() == protoreflect.MessageKind {
				v := l.NewElement()
				if depth < fillDepth {
					fill(rng, v.Message(), depth+1)
				}
				l.Append(v)
				continue
			}
			l.Append(scalar(rng, fd))
		}
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		v := m.NewField(fd)
		if fd.Message().FullName() == "google.protobuf.Any" {
			fillAny(rng, v.Message())
		} else if depth < fillDepth {
			fill(rng, v.Message(), depth+1)
		}
		m.Set(fd, v)
	default:
		m.Set(fd, scalar(rng, fd))
	}
}

// fillAny sets an Any as packing does: a type URL and bytes.
func fillAny(rng *rand.Rand, m protoreflect.Message) {
	a := &anypb.Any{TypeUrl: "type.googleapis.com/x.Y", Value: []byte{byte(rng.IntN(256)), 1, 2}}
	if rng.IntN(4) == 0 {
		a = &anypb.Any{}
	}
	proto.Merge(m.Interface(), a)
}

var fillStrings = []string{"", "a", "/", "/api/", "x-version", ":authority", "outbound|80||a.b.svc.cluster.local", "héllo", "\xff\xfe", "a\x00b", "*"}

func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rng.IntN(8) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(rng.Int32N(100) - 50))
		}
		return protoreflect.ValueOfEnum(vals.Get(rng.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, 127, 128, 1 << 30, -1 << 31}[rng.IntN(7)])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, 300, 1 << 40, -1 << 63}[rng.IntN(6)])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, 127, 128, 16384, 1<<32 - 1}[rng.IntN(6)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, 1 << 35, 1<<64 - 1}[rng.IntN(4)])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, 1.5, -2}[rng.IntN(3)])
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, 0.25, -7, 1e300}[rng.IntN(4)])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fillStrings[rng.IntN(len(fillStrings))])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fillStrings[rng.IntN(len(fillStrings))]))
	}
	panic("kind " + fd.Kind().String())
}

// TestMemoHTTPRoutesSharesOneTranslation: the sidecars of a namespace get
// one translation of a VirtualService, kept with its wire form; another
// namespace's get their own; a root with delegates expanded for one
// translation is not kept.
func TestMemoHTTPRoutesSharesOneTranslation(t *testing.T) {
	spec := &networkingv1.VirtualService{Hosts: []string{"a"}, Http: []*networkingv1.HTTPRoute{{
		Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: "a"}}}}}}
	vs := vsOf("a", "default", spec)
	snap := snapshot(gateway(httpServer("*")), vs)
	var m Memo
	scope := func(ns string, labels map[string]string) Scope {
		return Scope{Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: ns, Labels: labels}}
	}
	first, err := Options{}.MemoHTTPRoutes(&m, snap, vs, scope("default", map[string]string{"app": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Options{}.MemoHTTPRoutes(&m, snap, vs, scope("default", map[string]string{"app": "y"}))
	if &first[0] != &again[0] {
		t.Error("a sidecar of the same namespace with other labels got another translation")
	}
	other, _ := Options{}.MemoHTTPRoutes(&m, snap, vs, scope("other", nil))
	if &first[0] == &other[0] {
		t.Error("a sidecar of another namespace got the first namespace's translation")
	}
	raw := m.Encoded(snap)(first[0])
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(first[0])
	if !bytes.Equal(raw, want) {
		t.Error("the kept wire form is not the route's")
	}
	expanded := &model.VirtualService{Meta: vs.Meta, Spec: spec}
	if _, err := (Options{}).MemoHTTPRoutes(&m, snap, expanded, scope("default", nil)); err != nil {
		t.Fatal(err)
	}
	for _, s := range m.slots {
		if s == nil {
			continue
		}
		for k := range s.entries {
			if k.vs == expanded {
				t.Error("a VirtualService that is not the snapshot's was kept")
			}
		}
	}
}
