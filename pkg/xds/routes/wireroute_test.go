package routes

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// wireAgrees fails t unless wireTranslate, when it writes vs's routes in
// scope, writes the bytes MarshalRoutes gives of what translate builds,
// marks the same routes as catch-all and notes the same reads; and, when
// it leaves vs to translate, notes nothing. It reports whether it wrote
// them.
func wireAgrees(t *testing.T, o Options, snap *model.Snapshot, vs *model.VirtualService, scope Scope) bool {
	t.Helper()
	var wireReads, protoReads reads
	built, ok := o.wireTranslate(snap, vs, scope, &regexes{}, &wireReads)
	rs, err := o.translate(snap, vs, scope, &regexes{}, &protoReads)
	if !ok {
		if len(wireReads.ports)+len(wireReads.rules) > 0 {
			t.Fatalf("%s: left to translate, with reads noted: %+v", vs.Name, wireReads)
		}
		return false
	}
	if err != nil {
		t.Fatalf("%s: written, where translate refuses it: %v\n%v", vs.Name, err, vs.Spec)
	}
	want, err := MarshalRoutes(rs)
	if err != nil {
		t.Fatalf("%s: written, where the translation does not encode: %v", vs.Name, err)
	}
	if len(built) != len(want) {
		t.Fatalf("%s: %d routes written, translate built %d\n%v", vs.Name, len(built), len(want), vs.Spec)
	}
	for i, r := range built {
		if !bytes.Equal(r.raw, want[i]) {
			t.Fatalf("%s: route %d written differs from translate's:\n got %x\nwant %x\nroute %v\nspec %v", vs.Name, i, r.raw, want[i], rs[i], vs.Spec)
		}
		if r.catchAll != isCatchAll(rs[i]) {
			t.Fatalf("%s: route %d catch-all %v, translate's %v", vs.Name, i, r.catchAll, isCatchAll(rs[i]))
		}
	}
	if !sameReads(wireReads, protoReads) {
		t.Fatalf("%s: reads %+v, translate's %+v", vs.Name, wireReads, protoReads)
	}
	return true
}

// sameReads reports whether a and b note the same reads, as sets.
func sameReads(a, b reads) bool {
	sub := func(x, y reads) bool {
		for _, p := range x.ports {
			if !slices.Contains(y.ports, p) {
				return false
			}
		}
		for _, r := range x.rules {
			if !slices.Contains(y.rules, r) {
				return false
			}
		}
		return true
	}
	return sub(a, b) && sub(b, a)
}

// wireSnapshot has services of one port and of two, and a
// DestinationRule asking a consistent hash for one host.
func wireSnapshot(gw *model.Gateway, vss ...*model.VirtualService) *model.Snapshot {
	return model.Build("1", model.Options{Domain: "cluster.local"}, model.Resources{
		Services: []*model.Service{
			{Meta: model.Meta{Name: "reviews", Namespace: "default"}, Ports: []model.Port{{Name: "http", Port: 9080}}},
			{Meta: model.Meta{Name: "ratings", Namespace: "default"}, Ports: []model.Port{{Name: "a", Port: 80}, {Name: "b", Port: 81}}},
			{Meta: model.Meta{Name: "hashed", Namespace: "default"}, Ports: []model.Port{{Name: "http", Port: 8080}}},
		},
		DestinationRules: []*model.DestinationRule{{Meta: model.Meta{Name: "hashed", Namespace: "default"}, Spec: &networkingv1.DestinationRule{
			Host: "hashed.default.svc.cluster.local",
			TrafficPolicy: &networkingv1.TrafficPolicy{LoadBalancer: &networkingv1.LoadBalancerSettings{LbPolicy: &networkingv1.LoadBalancerSettings_ConsistentHash{
				ConsistentHash: &networkingv1.LoadBalancerSettings_ConsistentHashLB{HashKey: &networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}},
		}}},
		Gateways:        []*model.Gateway{gw},
		VirtualServices: vss,
	})
}

var wireHosts = []string{"reviews", "ratings", "hashed", "reviews.default.svc.cluster.local", "other.example.com", "a|b", "\xff", "*", "ratings.default", ""}

// mostlyWirable is a random VirtualService, filled as
// TestCheckRouteAgreesWithEnvoyOnRandomVirtualServices fills one, whose
// rules mostly keep to what wireTranslate writes: most redirects, direct
// responses, faults, CORS policies, regex rewrites and back-offs
// dropped, most matches applying in every scope, destinations mostly to
// known hosts.
func mostlyWirable(rng *rand.Rand) *networkingv1.VirtualService {
	spec := &networkingv1.VirtualService{}
	fill(rng, spec.ProtoReflect(), 1)
	if len(spec.Http) == 0 {
		r := &networkingv1.HTTPRoute{}
		fill(rng, r.ProtoReflect(), 2)
		spec.Http = append(spec.Http, r)
	}
	tame(rng, spec.ProtoReflect())
	spec.Hosts = []string{"a.example.com"}
	spec.Gateways = []string{"gw", Mesh}
	host := func(d *networkingv1.Destination) {
		if d != nil && (rng.IntN(5) > 0 || d.Host == "" && rng.IntN(10) > 0) {
			d.Host = wireHosts[rng.IntN(len(wireHosts)-1)]
		}
	}
	for _, r := range spec.GetHttp() {
		// Most matches apply in every scope.
		for _, m := range r.GetMatch() {
			if rng.IntN(4) > 0 {
				m.Port, m.Gateways, m.SourceLabels, m.SourceNamespace = 0, nil, nil, ""
			}
		}
		if len(r.Route) == 0 && rng.IntN(4) > 0 {
			r.Route = []*networkingv1.HTTPRouteDestination{{}}
		}
		for _, d := range r.GetRoute() {
			if d.Destination == nil && rng.IntN(4) > 0 {
				d.Destination = &networkingv1.Destination{}
			}
			if len(r.Route) > 1 && d.Weight == 0 && rng.IntN(2) > 0 {
				d.Weight = 1 + rng.Int32N(100)
			}
		}
		r.Delegate = nil
		if rng.IntN(8) > 0 {
			r.Redirect, r.DirectResponse, r.Fault, r.CorsPolicy = nil, nil, nil, nil
			if r.Rewrite != nil {
				r.Rewrite.UriRegexRewrite = nil
			}
			if r.Retries != nil {
				r.Retries.Backoff = nil
			}
		}
		for _, d := range r.GetRoute() {
			host(d.GetDestination())
		}
		host(r.GetMirror())
		for _, m := range r.GetMirrors() {
			host(m.GetDestination())
		}
	}
	return spec
}

// tame replaces in m, and in what it holds, most strings Envoy refuses
// (empty, not UTF-8, holding NUL, CR or LF) with "a": one in 40 is
// kept.
func tame(rng *rand.Rand, m protoreflect.Message) {
	str := func(s string) string {
		if (s == "" || !utf8.ValidString(s) || !headerSafe(s)) && rng.IntN(40) > 0 {
			return "a"
		}
		return s
	}
	value := func(kind protoreflect.Kind, v protoreflect.Value) protoreflect.Value {
		switch kind {
		case protoreflect.StringKind:
			return protoreflect.ValueOfString(str(v.String()))
		case protoreflect.MessageKind:
			tame(rng, v.Message())
		}
		return v
	}
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	for _, fd := range fields {
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			var keys []protoreflect.MapKey
			var vals []protoreflect.Value
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				keys, vals = append(keys, k), append(vals, v)
				return true
			})
			for _, k := range keys {
				mp.Clear(k)
			}
			for i, k := range keys {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					k = protoreflect.ValueOfString(str(k.String())).MapKey()
				}
				mp.Set(k, value(fd.MapValue().Kind(), vals[i]))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for i := range l.Len() {
				l.Set(i, value(fd.Kind(), l.Get(i)))
			}
		case fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.MessageKind:
			m.Set(fd, value(fd.Kind(), m.Get(fd)))
		}
	}
}

// TestWireRoutesMatchTranslateOnRandomVirtualServices holds the routes
// written straight to wire form to those translate builds, marshalled, on
// random VirtualServices (every field of the API, hostile strings among
// them), in a gateway's scopes and a sidecar's, with Istio's default
// retries and a mesh's own: a divergence in any byte fails. Both paths
// must be taken often, or the test proves little.
func TestWireRoutesMatchTranslateOnRandomVirtualServices(t *testing.T) {
	gw := gateway(httpServer("*"))
	scopes := []Scope{
		{Port: 80, Gateway: gwNs + "/gw"},
		{Port: 443, Gateway: gwNs + "/gw", TLS: true},
		{Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: "default", Labels: map[string]string{"a": "a"}}},
	}
	opts := []Options{{}, {DefaultRetry: &networkingv1.HTTPRetry{Attempts: 4, RetryOn: "5xx,429", PerTryTimeout: durationpb.New(time.Second)}}, {DefaultRetry: &networkingv1.HTTPRetry{}}}
	written, left := 0, 0
	for seed := range uint64(4000) {
		vs := vsOf(fmt.Sprint("random-", seed), "default", mostlyWirable(rand.New(rand.NewPCG(seed, 21))))
		snap := wireSnapshot(gw, vs)
		for i, scope := range scopes {
			if wireAgrees(t, opts[(int(seed)+i)%len(opts)], snap, vs, scope) {
				written++
			} else {
				left++
			}
		}
	}
	t.Logf("%d translations written straight to wire form, %d left to translate", written, left)
	if written < 2500 || left < 1000 {
		t.Fatalf("%d written, %d left to translate: the random VirtualServices no longer exercise both paths", written, left)
	}
}

// TestWireRoutesOfTranslations: the same over the VirtualServices of the
// other tests, and a busy ingress's VirtualService (weights, a header and
// a regex match, retries, a header operation, a mirror, a timeout) is
// written straight to wire form, not left to translate.
func TestWireRoutesOfTranslations(t *testing.T) {
	exact := func(v string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: v}}
	}
	busy := &networkingv1.VirtualService{Hosts: []string{"app.example.com"}, Gateways: []string{"gw"}, Http: []*networkingv1.HTTPRoute{
		{Name: "api", Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/api/"}},
			Headers: map[string]*networkingv1.StringMatch{"x-version": exact("v2")}}},
			Route: []*networkingv1.HTTPRouteDestination{
				{Destination: &networkingv1.Destination{Host: "reviews", Port: &networkingv1.PortSelector{Number: 9080}}, Weight: 90},
				{Destination: &networkingv1.Destination{Host: "ratings", Port: &networkingv1.PortSelector{Number: 80}}, Weight: 10}},
			Retries: &networkingv1.HTTPRetry{Attempts: 3, PerTryTimeout: durationpb.New(2 * time.Second), RetryOn: "5xx,503"}},
		{Name: "static", Match: regexMatch(`/static/[a-z0-9]+\.(css|js)`), Route: to("reviews"),
			Headers: &networkingv1.Headers{Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"cache-control": "max-age=60"}}}},
		{Name: "default", Route: to("reviews.default.svc.cluster.local"), Mirror: &networkingv1.Destination{Host: "ratings"},
			MirrorPercentage: &networkingv1.Percent{Value: 5}, Timeout: durationpb.New(10 * time.Second)},
	}}
	gw := gateway(httpServer("*"))
	vs := vsOf("busy", "default", busy)
	for _, scope := range []Scope{{Port: 80, Gateway: gwNs + "/gw"}, {Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: "default"}}} {
		if scope.Gateway == Mesh {
			vs = vsOf("busy", "default", proto.CloneOf(busy))
			vs.Spec.Gateways = []string{Mesh}
		}
		if !wireAgrees(t, Options{}, wireSnapshot(gw, vs), vs, scope) {
			t.Errorf("a busy ingress's VirtualService in %s was left to translate", scope.Gateway)
		}
	}
	for _, spec := range append(fuzzSeeds(), encodeSpecs()...) {
		spec = proto.CloneOf(spec)
		spec.Gateways = append(spec.Gateways, gwNs+"/gw", Mesh)
		vs := vsOf("t", "default", spec)
		snap := wireSnapshot(gw, vs)
		for _, scope := range []Scope{{Port: 80, Gateway: Mesh}, {Port: 443, Gateway: gwNs + "/gw", TLS: true}} {
			wireAgrees(t, Options{}, snap, vs, scope)
		}
	}
}

// FuzzWireRoutes: whatever VirtualService the fuzzer's bytes parse as,
// the routes written straight to wire form are translate's, marshalled.
func FuzzWireRoutes(f *testing.F) {
	for _, spec := range append(fuzzSeeds(), encodeSpecs()...) {
		b, err := proto.Marshal(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	gw := gateway(httpServer("*"))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec := &networkingv1.VirtualService{}
		if err := proto.Unmarshal(b, spec); err != nil {
			return
		}
		spec.Gateways = append(spec.Gateways, gwNs+"/gw", Mesh)
		vs := vsOf("fuzz", "default", spec)
		snap := wireSnapshot(gw, vs)
		for _, scope := range []Scope{{Port: 80, Gateway: gwNs + "/gw"}, {Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: "default"}}} {
			wireAgrees(t, Options{}, snap, vs, scope)
		}
	})
}
