package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bulwarkinject "github.com/bulwark-mesh/bulwark/pkg/inject"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	istioinject "istio.io/istio/pkg/kube/inject"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// istioTemplateDir is where the istio module ships the injection templates
// its Helm chart puts in the istio-sidecar-injector ConfigMap.
const istioTemplateDir = "manifests/charts/istio-control/istio-discovery/files"

// istioOnlyValues are keys Istio's templates read that Bulwark's values do
// not have, at the defaults of Istio's chart: no CNI, no STS port, no
// custom CA name, no ClusterTrustBundle. Without them the templates fail
// on a nil map.
const istioOnlyValues = `{
  "pilot": {"cni": {"enabled": false, "provider": ""}, "env": {}},
  "global": {"sts": {"servicePort": 0}, "caName": "", "mountMtlsCerts": false}
}`

// istioTemplates parses injection-template.yaml (as "sidecar"),
// grpc-agent.yaml and gateway-injection-template.yaml (as "gateway") from
// the istio module in the module cache, once.
var istioTemplates = sync.OnceValues(func() (istioinject.Templates, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		return nil, fmt.Errorf("locate istio.io/istio: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), istioTemplateDir)
	raw := istioinject.RawTemplates{}
	for name, file := range map[string]string{
		bulwarkinject.TemplateSidecar:   "injection-template.yaml",
		bulwarkinject.TemplateGRPCAgent: "grpc-agent.yaml",
		bulwarkinject.TemplateGateway:   "gateway-injection-template.yaml",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return nil, fmt.Errorf("read istio template: %w", err)
		}
		raw[name] = string(b)
	}
	t, err := istioinject.ParseTemplates(raw)
	if err != nil {
		return nil, fmt.Errorf("parse istio templates: %w", err)
	}
	return t, nil
})

// injectors is one set of values given to both injectors.
type injectors struct {
	ours   bulwarkinject.Params
	values istioinject.ValuesConfig
	mesh   *meshv1alpha1.MeshConfig
	rev    string
	tmpls  istioinject.Templates
}

// newInjectors builds Bulwark's Params from its embedded defaults laid under
// valuesJSON, and Istio's values and mesh config from the very same
// document, so the two injectors see one configuration.
func newInjectors(tb testing.TB, namespace, valuesJSON string) *injectors {
	tb.Helper()
	tmpls, err := istioTemplates()
	if err != nil {
		tb.Fatal(err)
	}
	cfg, vals, err := bulwarkinject.ParseConfig(nil, []byte(valuesJSON))
	if err != nil {
		tb.Fatalf("bulwark config: %v", err)
	}

	_, defVals := bulwarkinject.DefaultConfigFiles()
	merged := map[string]any{}
	for _, doc := range []string{string(defVals), valuesJSON, istioOnlyValues} {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			tb.Fatalf("values document: %v", err)
		}
		deepMerge(merged, m)
	}
	meshDoc, _ := merged["meshConfig"].(map[string]any)
	valuesYAML, err := yaml.Marshal(merged)
	if err != nil {
		tb.Fatal(err)
	}
	iv, err := istioinject.NewValuesConfig(string(valuesYAML))
	if err != nil {
		tb.Fatalf("istio values: %v", err)
	}

	// The mesh config istiod would load: Istio's defaults, the values'
	// meshConfig, and the discovery address Istio's chart writes into
	// defaultConfig for this revision.
	mc := mesh.DefaultMeshConfig()
	if meshDoc != nil {
		b, err := yaml.Marshal(meshDoc)
		if err != nil {
			tb.Fatal(err)
		}
		if mc, err = mesh.ApplyMeshConfig(string(b), mc); err != nil {
			tb.Fatalf("istio mesh config: %v", err)
		}
	}
	mc.DefaultConfig.DiscoveryAddress = vals.DiscoveryAddress()
	// Bulwark's injector turns on PCDS (the trust bundle over xDS) unless
	// the mesh sets the variable; Istio's does so through the same
	// proxyMetadata.
	if _, set := mc.DefaultConfig.ProxyMetadata[bulwarkinject.EnvProxyConfigXDSAgent]; !set {
		if mc.DefaultConfig.ProxyMetadata == nil {
			mc.DefaultConfig.ProxyMetadata = map[string]string{}
		}
		mc.DefaultConfig.ProxyMetadata[bulwarkinject.EnvProxyConfigXDSAgent] = "true"
	}

	return &injectors{
		ours:   bulwarkinject.Params{Namespace: namespace, Config: cfg, Values: vals},
		values: iv,
		mesh:   mc,
		rev:    vals.Revision,
		tmpls:  tmpls,
	}
}

func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				deepMerge(dm, sm)
				continue
			}
			cp := map[string]any{}
			deepMerge(cp, sm)
			dst[k] = cp
			continue
		}
		dst[k] = v
	}
}

// istio runs Istio's own injector the way `istioctl kube-inject` does
// (inject.IntoObject without a cluster): template, strategic merge, probe
// rewrite, Prometheus merge, reordering and the status annotation, applied
// to the pod as a JSON patch.
func (in *injectors) istio(pod *corev1.Pod) (*corev1.Pod, error) {
	out, err := istioinject.IntoObject(nil, in.tmpls, in.values, in.rev, in.meshCopy(), pod.DeepCopy(), func(string) {})
	if err != nil {
		return nil, err
	}
	p, ok := out.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("istio returned %T", out)
	}
	return p, nil
}

// meshCopy gives every run its own mesh config: IntoObject replaces it
// when a pod carries proxy.istio.io/config.
func (in *injectors) meshCopy() *meshv1alpha1.MeshConfig {
	mc, err := mesh.DeepCopyMeshConfig(in.mesh)
	if err != nil {
		panic(err) // a valid message always copies
	}
	return mc
}

// bulwark runs our injector: Mutate for the pod, and Inject's JSON patch
// applied to the original, which must give the same pod.
func (in *injectors) bulwark(pod *corev1.Pod) (mutated, patched *corev1.Pod, err error) {
	mutated, res, err := bulwarkinject.Mutate(pod, in.ours)
	if err != nil {
		return nil, nil, err
	}
	if !res.Injected {
		return nil, nil, fmt.Errorf("not injected: %s", res.Reason)
	}
	res, err = bulwarkinject.Inject(pod, in.ours)
	if err != nil {
		return nil, nil, err
	}
	patched, err = applyPatch(pod, res.Patch)
	if err != nil {
		return nil, nil, err
	}
	return mutated, patched, nil
}
