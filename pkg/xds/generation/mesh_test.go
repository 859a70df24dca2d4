package generation

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

func TestEnvoyMeshFollowsIstiosDefaults(t *testing.T) {
	cases := map[string]struct {
		mc       *meshv1alpha1.MeshConfig
		registry bool
		noAuto   bool
		h2       bool
	}{
		"no mesh configuration is ALLOW_ANY with auto-mTLS":                {mc: nil},
		"an empty mesh configuration is ALLOW_ANY with auto-mTLS":          {mc: &meshv1alpha1.MeshConfig{}},
		"an outbound traffic policy of REGISTRY_ONLY blocks":               {mc: &meshv1alpha1.MeshConfig{OutboundTrafficPolicy: &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{}}, registry: true},
		"enableAutoMtls false turns auto-mTLS off":                         {mc: &meshv1alpha1.MeshConfig{EnableAutoMtls: wrapperspb.Bool(false)}, noAuto: true},
		"the parsed defaults are ALLOW_ANY with auto-mTLS, as Istio's are": {mc: meshconfig.Default(meshconfig.Defaults{})},
		"h2UpgradePolicy UPGRADE upgrades":                                 {mc: &meshv1alpha1.MeshConfig{H2UpgradePolicy: meshv1alpha1.MeshConfig_UPGRADE}, h2: true},
		"h2UpgradePolicy DO_NOT_UPGRADE does not":                          {mc: &meshv1alpha1.MeshConfig{H2UpgradePolicy: meshv1alpha1.MeshConfig_DO_NOT_UPGRADE}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := envoyMesh(tc.mc)
			if m.RegistryOnly != tc.registry || m.DisableAutoMTLS != tc.noAuto || m.H2Upgrade != tc.h2 {
				t.Errorf("got %+v, want RegistryOnly %v DisableAutoMTLS %v H2Upgrade %v", m, tc.registry, tc.noAuto, tc.h2)
			}
		})
	}
}

func TestEnvoyMeshCarriesTLSDefaults(t *testing.T) {
	m := envoyMesh(&meshv1alpha1.MeshConfig{TlsDefaults: &meshv1alpha1.MeshConfig_TLSConfig{
		EcdhCurves: []string{"P-256"}, CipherSuites: []string{"ECDHE-ECDSA-AES128-GCM-SHA256"},
	}})
	if !slices.Equal(m.TLSDefaults.ECDHCurves, []string{"P-256"}) || !slices.Equal(m.TLSDefaults.CipherSuites, []string{"ECDHE-ECDSA-AES128-GCM-SHA256"}) {
		t.Errorf("TLS defaults %+v", m.TLSDefaults)
	}
	if m := envoyMesh(nil); m.TLSDefaults.ECDHCurves != nil || m.TLSDefaults.CipherSuites != nil {
		t.Errorf("no mesh configuration: TLS defaults %+v", m.TLSDefaults)
	}
}
