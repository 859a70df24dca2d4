package inject

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// TestMeshConfigIsReadFromTheWatchedMeshWhenGiven: as Istio's injector
// reads istiod's mesh configuration, Params.Mesh replaces the values'
// meshConfig for what the injected proxy gets.
func TestMeshConfigIsReadFromTheWatchedMeshWhenGiven(t *testing.T) {
	cases := map[string]struct {
		mesh      *meshv1alpha1.MeshConfig
		discovery string
		td        string
		promMerge bool
	}{
		"without a watched mesh the values' meshConfig and this istiod's address apply": {
			discovery: "istiod.istio-system.svc:15012", td: "cluster.local", promMerge: true,
		},
		"the watched mesh's discovery address and trust domain": {
			mesh:      &meshv1alpha1.MeshConfig{TrustDomain: "example.org", DefaultConfig: &meshv1alpha1.ProxyConfig{DiscoveryAddress: "istiod.mesh.svc:15012"}},
			discovery: "istiod.mesh.svc:15012", td: "example.org", promMerge: true,
		},
		"a watched mesh without a default ProxyConfig gets this istiod's address": {
			mesh:      &meshv1alpha1.MeshConfig{TrustDomain: "cluster.local", EnablePrometheusMerge: wrapperspb.Bool(false)},
			discovery: "istiod.istio-system.svc:15012", td: "cluster.local", promMerge: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := defaultParams(t)
			p.Mesh = tc.mesh
			out, res, err := Mutate(appPod(map[string]string{"prometheus.io/scrape": "true"}, nil), p)
			if err != nil || !res.Injected {
				t.Fatalf("not injected: %v %v", res, err)
			}
			proxy := proxyOf(out)
			raw, _ := envValue(proxy, "PROXY_CONFIG")
			var pc struct {
				DiscoveryAddress string `json:"discoveryAddress"`
			}
			if err := json.Unmarshal([]byte(raw), &pc); err != nil {
				t.Fatal(err)
			}
			if pc.DiscoveryAddress != tc.discovery {
				t.Errorf("PROXY_CONFIG discoveryAddress %q, want %q", pc.DiscoveryAddress, tc.discovery)
			}
			if td, _ := envValue(proxy, "TRUST_DOMAIN"); td != tc.td {
				t.Errorf("TRUST_DOMAIN %q, want %q", td, tc.td)
			}
			if merged := out.Annotations["prometheus.io/path"] == "/stats/prometheus"; merged != tc.promMerge {
				t.Errorf("prometheus merge %v, want %v (annotations %v)", merged, tc.promMerge, out.Annotations)
			}
		})
	}
}

func TestAWatchedMeshTheInjectorRefusesDeniesInjection(t *testing.T) {
	for name, mesh := range map[string]*meshv1alpha1.MeshConfig{
		"a privileged interception mode": {DefaultConfig: &meshv1alpha1.ProxyConfig{InterceptionMode: meshv1alpha1.ProxyConfig_TPROXY}},
		"a reserved proxyMetadata key":   {DefaultConfig: &meshv1alpha1.ProxyConfig{ProxyMetadata: map[string]string{"CA_ADDR": "evil:15012"}}},
		"an invalid trust domain":        {TrustDomain: "Not A Domain"},
	} {
		t.Run(name, func(t *testing.T) {
			p := defaultParams(t)
			p.Mesh = mesh
			if _, _, err := Mutate(appPod(nil, nil), p); err == nil || !strings.Contains(err.Error(), "mesh config") {
				t.Fatalf("err = %v, want a mesh config error", err)
			}
			if err := CheckMeshConfig(mesh); err == nil {
				t.Fatal("CheckMeshConfig accepts it")
			}
		})
	}
}

// TestHandlerReadsTheCurrentMeshOnEveryRequest: the webhook takes the mesh
// configuration current at each request, so an edit of the istio
// ConfigMap reaches the next pod without a restart.
func TestHandlerReadsTheCurrentMeshOnEveryRequest(t *testing.T) {
	addr := "istiod.first.svc:15012"
	h := NewHandler(NewStore(), testLogger(t), WithMeshConfig(func() *meshv1alpha1.MeshConfig {
		return &meshv1alpha1.MeshConfig{TrustDomain: "cluster.local", DefaultConfig: &meshv1alpha1.ProxyConfig{DiscoveryAddress: addr}}
	}))
	for _, want := range []string{"istiod.first.svc:15012", "istiod.second.svc:15012"} {
		addr = want
		out := decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, "admission.k8s.io/v1", appPod(nil, nil))))
		if !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), `\"discoveryAddress\":\"`+want+`\"`) {
			t.Fatalf("allowed %v, patch without discovery address %s:\n%s", out.Response.Allowed, want, out.Response.Patch)
		}
	}
}
