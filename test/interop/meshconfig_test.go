package interop

import (
	"slices"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

// TestMeshConfigParsesLikeIstio reads each document with Bulwark's parser
// (pkg/meshconfig) and with Istio's own (pkg/config/mesh
// ApplyMeshConfigDefaults, which istiod runs on the mounted file): both
// must accept or both refuse, and where they accept, the fields Bulwark
// reads must be equal.
func TestMeshConfigParsesLikeIstio(t *testing.T) {
	cases := map[string]string{
		"an empty document":                      "",
		"Istio's egress task":                    "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n",
		"ALLOW_ANY spelled out":                  "outboundTrafficPolicy:\n  mode: ALLOW_ANY\n",
		"a policy without mode":                  "outboundTrafficPolicy: {}\n",
		"auto mTLS off":                          "enableAutoMtls: false\n",
		"auto mTLS on":                           "enableAutoMtls: true\n",
		"a root namespace":                       "rootNamespace: mesh-root\n",
		"a null field":                           "trustDomain: null\nrootNamespace: null\n",
		"snake_case names":                       "root_namespace: other\nenable_auto_mtls: false\n",
		"JSON":                                   `{"outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"},"trustDomain":"example.org"}`,
		"an unknown field":                       "someFutureField: {a: 1}\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n",
		"an unknown nested field":                "outboundTrafficPolicy: {mode: REGISTRY_ONLY, egressProxy2: x}\n",
		"Istio's trust domain migration example": "trustDomain: new-td\ntrustDomainAliases:\n  - old-td\n  - cluster.local\n  - old-td\n",
		"a trust domain with a trailing dot":     "trustDomain: istio.io.\n",
		"the chart's mesh": "enablePrometheusMerge: true\nrootNamespace: istio-system\ntrustDomain: cluster.local\n" +
			"defaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n",
		"another discovery address":    "defaultConfig:\n  discoveryAddress: istiod-canary.mesh.svc:15012\n",
		"prometheus merge off":         "enablePrometheusMerge: false\n",
		"an invalid trust domain":      "trustDomain: Not_Valid\n",
		"an empty trust domain":        "trustDomain: \"\"\n",
		"an invalid alias":             "trustDomainAliases: [\"bad alias\"]\n",
		"text that is not YAML":        "outboundTrafficPolicy: [\n",
		"a field of the wrong type":    "enableAutoMtls: [1]\n",
		"an unknown traffic mode name": "outboundTrafficPolicy: {mode: SOMETIMES}\n",
	}
	defaults := meshconfig.Defaults{TrustDomain: "cluster.local", RootNamespace: "istio-system"}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			ours, _, ourErr := meshconfig.Parse([]byte(doc), defaults)
			istio, istioErr := mesh.ApplyMeshConfigDefaults(doc)
			if (ourErr == nil) != (istioErr == nil) {
				t.Fatalf("Bulwark: %v; Istio: %v — one accepts what the other refuses", ourErr, istioErr)
			}
			if ourErr != nil {
				return
			}
			type fields struct {
				TrustDomain, RootNamespace, DiscoveryAddress string
				Aliases                                      []string
				AutoMTLS, PrometheusMerge                    bool
				Mode                                         meshv1alpha1.MeshConfig_OutboundTrafficPolicy_Mode
			}
			of := func(mc *meshv1alpha1.MeshConfig) fields {
				addr := mc.GetDefaultConfig().GetDiscoveryAddress()
				if addr == "" {
					// Bulwark leaves it to the injector, which uses this
					// istiod's own address: for the default revision in
					// istio-system, Istio's default.
					addr = "istiod.istio-system.svc:15012"
				}
				return fields{
					TrustDomain: mc.GetTrustDomain(), RootNamespace: mc.GetRootNamespace(), DiscoveryAddress: addr,
					Aliases:  slices.Clone(mc.GetTrustDomainAliases()),
					AutoMTLS: mc.GetEnableAutoMtls().GetValue(), PrometheusMerge: mc.GetEnablePrometheusMerge().GetValue(),
					Mode: mc.GetOutboundTrafficPolicy().GetMode(),
				}
			}
			got, want := of(ours), of(istio)
			if got.TrustDomain != want.TrustDomain || got.RootNamespace != want.RootNamespace || got.DiscoveryAddress != want.DiscoveryAddress ||
				!slices.Equal(got.Aliases, want.Aliases) || got.AutoMTLS != want.AutoMTLS || got.PrometheusMerge != want.PrometheusMerge || got.Mode != want.Mode {
				t.Errorf("Bulwark %+v\nIstio   %+v", got, want)
			}
		})
	}
}
