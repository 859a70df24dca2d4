package bootstrap

import (
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

func TestNewTakesTheMeshConfigItStartsWith(t *testing.T) {
	tproxy := meshconfig.Default(meshconfig.Defaults{TrustDomain: "cluster.local"})
	tproxy.DefaultConfig = &meshv1alpha1.ProxyConfig{InterceptionMode: meshv1alpha1.ProxyConfig_TPROXY}
	registryOnly := meshconfig.Default(meshconfig.Defaults{TrustDomain: "cluster.local"})
	registryOnly.OutboundTrafficPolicy.Mode = meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY
	for name, tc := range map[string]struct {
		mesh *meshv1alpha1.MeshConfig
		want string // substring of New's error; empty: New succeeds
	}{
		"no mesh config is the defaults":                            {},
		"a valid one is served from the start":                      {mesh: registryOnly},
		"one whose defaultConfig the injector refuses stops istiod": {mesh: tproxy, want: "TPROXY"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.StateDir, cfg.Mesh = t.TempDir(), tc.mesh
			srv, err := New(cfg, catest.Logger(t))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.mesh != nil && srv.mesh.Current() != tc.mesh {
				t.Error("the mesh config istiod started with is not the one served")
			}
			if !strings.HasSuffix(srv.cfg.MeshConfigFile, "mesh.yaml") {
				t.Errorf("local mesh config file %q, want <state-dir>/mesh.yaml", srv.cfg.MeshConfigFile)
			}
		})
	}
}
