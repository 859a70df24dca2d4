package helm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/pkg/inject"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

// injectorNames is the injector ConfigMap and the istiod Service of a case.
func injectorNames(tc renderCase) (configMap, service string) {
	r := ""
	if b, err := MergeValues(tc.opts.ValuesFiles, tc.opts.Values); err == nil {
		if rev, _ := b["revision"].(string); rev != "" {
			r = "-" + rev
		}
	}
	return "istio-sidecar-injector" + r, "istiod" + r
}

// The injector reads the ConfigMap strictly: an unknown key stops it.
func TestInjectorConfigMapIsWhatIstiodReads(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			cmName, svc := injectorNames(tc)
			ns := or(tc.opts.Namespace, DefaultNamespace)
			data := configMap(t, mustRender(t, tc.opts), cmName)
			cfg, vals, err := inject.ParseConfig([]byte(data["config"]), []byte(data["values"]))
			if err != nil {
				t.Fatalf("istiod rejects the chart's injector ConfigMap: %v\nconfig:\n%s\nvalues:\n%s", err, data["config"], data["values"])
			}
			if cfg.Policy != inject.PolicyEnabled {
				t.Errorf("policy %q", cfg.Policy)
			}
			if got, want := vals.DiscoveryAddress(), svc+"."+ns+".svc:15012"; got != want {
				t.Errorf("injected proxies would dial %s, want %s", got, want)
			}
			if vals.Global.IstioNamespace != ns {
				t.Errorf("istioNamespace %q, want %q", vals.Global.IstioNamespace, ns)
			}
		})
	}
}

// With its default values the chart carries istiod's own built-in injector
// defaults (pkg/inject/defaults), key for key; only what the install decides
// (revision, namespace, trust domain, cluster, mesh config) may differ.
func TestInjectorDefaultsMatchIstiods(t *testing.T) {
	data := configMap(t, mustRender(t, Options{}), "istio-sidecar-injector")
	defConfig, defValues := inject.DefaultConfigFiles()

	var gotCfg, wantCfg map[string]any
	if err := yaml.Unmarshal([]byte(data["config"]), &gotCfg); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(defConfig, &wantCfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotCfg, wantCfg) {
		t.Errorf("config differs from pkg/inject/defaults/config.yaml:\n got %v\nwant %v", gotCfg, wantCfg)
	}

	got, want := flatten(t, []byte(data["values"])), flatten(t, defValues)
	decidedByInstall := map[string]bool{
		"revision": true, "global.istioNamespace": true, "global.trustDomain": true,
		"global.multiCluster.clusterName": true,
	}
	var diffs []string
	for k, w := range want {
		if strings.HasPrefix(k, "meshConfig.") || decidedByInstall[k] {
			continue
		}
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s (default %v)", k, w))
		} else if !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s = %v, default %v", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "meshConfig.") {
			diffs = append(diffs, "extra key "+k)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("values differ from pkg/inject/defaults/values.json:\n%s", strings.Join(diffs, "\n"))
	}
	for k, w := range map[string]any{
		"revision": "", "global.istioNamespace": DefaultNamespace,
		"global.trustDomain": "cluster.local", "global.multiCluster.clusterName": "Kubernetes",
	} {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
}

// flatten turns a JSON document into dotted paths and leaf values; empty
// objects and lists are leaves.
func flatten(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("values are not JSON: %v", err)
	}
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			out[prefix] = v
			return
		}
		for k, sub := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, sub)
		}
	}
	walk("", v)
	return out
}

func TestMeshConfigIsIstiosMeshConfig(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			_, svc := injectorNames(tc)
			ns := or(tc.opts.Namespace, DefaultNamespace)
			r := mustRender(t, tc.opts)
			cmName := strings.Replace(svc, "istiod", "istio", 1)
			data := configMap(t, r, cmName)
			mesh := &meshv1alpha1.MeshConfig{}
			parseProto(t, data["mesh"], mesh)
			if mesh.GetRootNamespace() != ns {
				t.Errorf("rootNamespace %q, want %q", mesh.GetRootNamespace(), ns)
			}
			if got, want := mesh.GetDefaultConfig().GetDiscoveryAddress(), svc+"."+ns+".svc:15012"; got != want {
				t.Errorf("discoveryAddress %q, want %q", got, want)
			}
			vals, _ := MergeValues(tc.opts.ValuesFiles, tc.opts.Values)
			td, _ := vals["trustDomain"].(string)
			if mesh.GetTrustDomain() != or(td, "cluster.local") {
				t.Errorf("trustDomain %q", mesh.GetTrustDomain())
			}
			parseProto(t, data["meshNetworks"], &meshv1alpha1.MeshNetworks{})
		})
	}
}

// parseProto reads YAML into an Istio API message, refusing unknown fields.
func parseProto(t *testing.T, y string, into proto.Message) {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("not YAML: %v\n%s", err, y)
	}
	if err := protojson.Unmarshal(j, into); err != nil {
		t.Errorf("not a valid %T: %v\n%s", into, err, y)
	}
}

// TestIstiodRunsWithTheMeshConfigsTrustDomain: istiod reads the mounted
// mesh config (--meshConfig) and refuses to start when --trust-domain
// disagrees with its trustDomain, so the chart gives both the same value,
// also when only meshConfig.trustDomain is set; and Bulwark's own parser
// accepts the rendered mesh.
func TestIstiodRunsWithTheMeshConfigsTrustDomain(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"the default":                      {want: "cluster.local"},
		"trustDomain":                      {values: map[string]any{"trustDomain": "mesh.example.com"}, want: "mesh.example.com"},
		"meshConfig.trustDomain wins":      {values: map[string]any{"trustDomain": "a.example.com", "meshConfig": map[string]any{"trustDomain": "b.example.com"}}, want: "b.example.com"},
		"meshConfig.trustDomain alone too": {values: map[string]any{"meshConfig": map[string]any{"trustDomain": "b.example.com"}}, want: "b.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, Options{Values: tc.values})
			d := deployment(t, r)
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, want := range []string{"--trust-domain=" + tc.want, "--meshConfig=/etc/istio/config/mesh"} {
				if !slices.Contains(args, want) {
					t.Errorf("args %v lack %s", args, want)
				}
			}
			if got := envOf(d)["TRUST_DOMAIN"]; got != tc.want {
				t.Errorf("TRUST_DOMAIN %q, want %q", got, tc.want)
			}
			mc, _, err := meshconfig.Parse([]byte(configMap(t, r, "istio")["mesh"]), meshconfig.Defaults{})
			if err != nil {
				t.Fatalf("istiod would refuse the rendered mesh config: %v", err)
			}
			if mc.GetTrustDomain() != tc.want {
				t.Errorf("mesh trustDomain %q, want %q", mc.GetTrustDomain(), tc.want)
			}
			if !strings.Contains(configMap(t, r, "istio-sidecar-injector")["values"], `"trustDomain": "`+tc.want+`"`) {
				t.Errorf("injector values do not carry trustDomain %s", tc.want)
			}
		})
	}
}
