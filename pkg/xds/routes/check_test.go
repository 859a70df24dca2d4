package routes

import (
	"math/rand/v2"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// agreeWithEnvoy fails t unless checkRoute refuses each of rs exactly
// when Envoy's own validation (ValidateAll) does.
func agreeWithEnvoy(t *testing.T, rs []*routev3.Route, what string) {
	t.Helper()
	for _, r := range rs {
		ours, envoy := checkRoute(r), r.ValidateAll()
		if (ours == nil) != (envoy == nil) {
			t.Fatalf("%s: checkRoute says %v, Envoy's validation %v, of %v", what, ours, envoy, r)
		}
	}
}

// TestCheckRouteAgreesWithEnvoyOnRandomVirtualServices translates
// VirtualServices filled at random (every field of the API, hostile
// strings among them) in a gateway's and a sidecar's scope, and holds
// checkRoute to Envoy's validation on every route built: what checkRoute
// leaves unchecked on each route is valid whatever the input.
func TestCheckRouteAgreesWithEnvoyOnRandomVirtualServices(t *testing.T) {
	gw := gateway(httpServer("*"))
	routes := 0
	for seed := range uint64(4000) {
		spec := &networkingv1.VirtualService{}
		fill(rand.New(rand.NewPCG(seed, 11)), spec.ProtoReflect(), 1)
		spec.Hosts = []string{"a.example.com"}
		spec.Gateways = []string{"gw", Mesh}
		for _, r := range spec.GetHttp() {
			r.Delegate = nil
		}
		vs := vsOf("random", gwNs, spec)
		snap := snapshot(gw, vs)
		for _, scope := range []Scope{{Port: 80, Gateway: gwNs + "/gw"}, {Port: 80, Gateway: Mesh, Proxy: Proxy{Namespace: gwNs}}} {
			built, err := Options{}.build(snap, vs, scope, &regexes{}, nil)
			if err != nil {
				continue
			}
			agreeWithEnvoy(t, built, "random VirtualService")
			routes += len(built)
		}
	}
	if routes < 1000 {
		t.Fatalf("only %d routes built", routes)
	}
}

// TestCheckRouteAgreesWithEnvoyOnTranslations: the same over the
// VirtualServices of the other tests.
func TestCheckRouteAgreesWithEnvoyOnTranslations(t *testing.T) {
	for _, spec := range append(fuzzSeeds(), encodeSpecs()...) {
		spec = proto.CloneOf(spec)
		spec.Gateways = append(spec.Gateways, "gw", Mesh)
		vs := vsOf("t", gwNs, spec)
		built, err := Options{}.build(snapshot(gateway(httpServer("*")), vs), vs, Scope{Port: 80, Gateway: Mesh}, &regexes{}, nil)
		if err == nil {
			agreeWithEnvoy(t, built, "translation")
		}
	}
}

// TestValidDomainAgreesWithEnvoy: validDomain refuses a host exactly when
// Envoy refuses its virtual host.
func TestValidDomainAgreesWithEnvoy(t *testing.T) {
	for _, h := range []string{"", "a.example.com", "*.example.com", "*", "a\x00b", "a\nb", "a\rb", "\xff", "a b", "[::1]", "héllo"} {
		vh := &routev3.VirtualHost{Name: h + ":80", Domains: []string{h}}
		ours, envoy := validDomain(h, 80), vh.ValidateAll()
		if h == "" {
			envoy = ours // refused on purpose: Envoy's rule lets an empty domain pass
		}
		if (ours == nil) != (envoy == nil) {
			t.Errorf("host %q: validDomain says %v, Envoy's validation %v", h, ours, envoy)
		}
	}
}
