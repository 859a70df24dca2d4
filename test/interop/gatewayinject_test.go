package interop

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	istiohelm "istio.io/istio/operator/pkg/helm"
	"istio.io/istio/operator/pkg/values"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	bulwarkinject "github.com/bulwark-mesh/bulwark/pkg/inject"
)

// istioManifests is the manifests/ directory of the istio module: its
// charts/gateway is the istio/gateway Helm chart.
var istioManifests = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		return "", fmt.Errorf("locate istio.io/istio: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "manifests"), nil
})

// gatewayChartPod renders Istio's istio/gateway chart with Istio's own
// chart renderer (the one istioctl uses) and returns the Pod its Deployment
// describes, as the ReplicaSet controller would create it: named after a
// ReplicaSet of the Deployment, which owns it.
func gatewayChartPod(tb testing.TB, release, namespace string, chartValues map[string]any) *corev1.Pod {
	tb.Helper()
	dir, err := istioManifests()
	if err != nil {
		tb.Fatal(err)
	}
	if chartValues == nil {
		chartValues = map[string]any{}
	}
	iop := values.Map{"spec": map[string]any{"values": chartValues, "installPackagePath": dir}}
	objs, _, err := istiohelm.Render(release, namespace, "gateway", iop, nil)
	if err != nil {
		tb.Fatalf("render istio/gateway: %v", err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
			tb.Fatalf("Deployment: %v", err)
		}
		return podOfDeployment(&dep, namespace)
	}
	tb.Fatal("istio/gateway rendered no Deployment")
	return nil
}

// podOfDeployment is the Pod a ReplicaSet of dep creates.
func podOfDeployment(dep *appsv1.Deployment, namespace string) *corev1.Pod {
	const hash = "7c9d8f6b5"
	rs := dep.Name + "-" + hash
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
	pod.GenerateName, pod.Namespace = rs+"-", namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["pod-template-hash"] = hash
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "5d0c6c1e-1d1e-4c1b-9a51-000000000001",
		Controller: ptr(true), BlockOwnerDeletion: ptr(true),
	}}
	return pod
}

// gatewayInjectCases are values of Istio's gateway chart (chart) and of the
// injector (values, laid over the built-in values for both injectors).
var gatewayInjectCases = map[string]struct {
	release, namespace string
	chart              map[string]any
	values             string
	// pod, when set, is the pod instead of the chart's.
	pod string
}{
	"a pod of its own with no istio-proxy container": {pod: `
metadata:
  name: edge
  namespace: edge
  labels: {app: edge, istio: edge}
  annotations: {inject.istio.io/templates: gateway}
spec:
  serviceAccountName: edge
  containers:
  - name: log-shipper
    image: example.com/shipper:1
    ports: [{name: http, containerPort: 9000}]
    livenessProbe: {tcpSocket: {port: 9000}}
`},
	"the chart's pod as it is": {release: "istio-ingressgateway", namespace: "istio-ingress"},
	"custom labels and pod annotations": {
		release: "edge", namespace: "edge",
		chart: map[string]any{
			"labels":         map[string]any{"team": "payments", "app.kubernetes.io/version": "2.0", "version": "v2"},
			"podAnnotations": map[string]any{"inject.istio.io/templates": "gateway", "example.com/owner": "payments", "sidecar.istio.io/logLevel": "debug"},
		},
	},
	"a custom image by annotation": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{"podAnnotations": map[string]any{
			"inject.istio.io/templates":   "gateway",
			"sidecar.istio.io/inject":     "true",
			"sidecar.istio.io/proxyImage": "registry.example.com:5000/mesh/proxyv2:1.28.0-distroless",
		}},
	},
	"a custom image by the injector's values": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		values: `{"global": {"hub": "registry.example.com/istio", "tag": "1.28.1", "imagePullPolicy": "IfNotPresent"}}`,
	},
	"native sidecars and proxy resource annotations, which the gateway template does not read": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{"podAnnotations": map[string]any{
			"inject.istio.io/templates":                    "gateway",
			"sidecar.istio.io/nativeSidecar":               "true",
			"sidecar.istio.io/proxyCPU":                    "50m",
			"sidecar.istio.io/proxyMemoryLimit":            "256Mi",
			"traffic.sidecar.istio.io/includeInboundPorts": "8080",
		}},
		values: `{"global": {"nativeSidecar": true}}`,
	},
	"resources set": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{"resources": map[string]any{
			"requests": map[string]any{"cpu": "1", "memory": "512Mi"},
			"limits":   map[string]any{"cpu": "4", "memory": "2Gi"},
		}},
	},
	"environment, mounts, pull policy and pull secrets of the chart": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{
			"env":              map[string]any{"ISTIO_META_ROUTER_MODE": "sni-dnat", "PILOT_CERT_PROVIDER": "istiod"},
			"imagePullPolicy":  "Always",
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
			"volumes":          []any{map[string]any{"name": "edge-certs", "secret": map[string]any{"secretName": "edge-certs"}}},
			"volumeMounts":     []any{map[string]any{"name": "edge-certs", "mountPath": "/etc/edge-certs", "readOnly": true}},
		},
		values: `{"global": {"imagePullSecrets": ["mesh-pull"]}}`,
	},
	"a network gateway with cluster, network and mesh ID in the values": {
		release: "istio-eastwestgateway", namespace: "istio-system",
		chart:  map[string]any{"networkGateway": "net-east"},
		values: `{"revision": "canary", "global": {"network": "net-east", "meshID": "mesh-1", "logAsJson": true, "multiCluster": {"clusterName": "east"}}}`,
	},
	"the chart's own pod and container security contexts": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{
			"securityContext":          map[string]any{"runAsNonRoot": true, "fsGroup": 1337},
			"containerSecurityContext": map[string]any{"runAsUser": 1500, "readOnlyRootFilesystem": true},
		},
	},
	"an extra container with a probe, held until the proxy starts": {
		release: "istio-ingressgateway", namespace: "istio-ingress",
		chart: map[string]any{
			"podAnnotations": map[string]any{
				"inject.istio.io/templates": "gateway",
				"proxy.istio.io/config":     `{"holdApplicationUntilProxyStarts": true}`,
				"prometheus.io/scrape":      "true",
				"prometheus.io/port":        "9100",
			},
			"additionalContainers": []any{map[string]any{
				"name": "log-shipper", "image": "example.com/shipper:1",
				"ports":          []any{map[string]any{"name": "http", "containerPort": 9000}},
				"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/ready", "port": "http"}},
			}},
		},
	},
}

// TestGatewayInjectMatchesIstio renders Istio's istio/gateway chart, takes
// the Pod of its Deployment, and injects it with Istio's injector (its
// gateway-injection-template.yaml) and with Bulwark's gateway template;
// the injected pods must agree field by field. The deliberate differences
// are normalized by name; each is listed in pkg/inject's package
// documentation.
func TestGatewayInjectMatchesIstio(t *testing.T) {
	for name, tc := range gatewayInjectCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var pod *corev1.Pod
			if tc.pod != "" {
				pod = parsePod(t, tc.pod)
			} else {
				pod = gatewayChartPod(t, tc.release, tc.namespace, tc.chart)
				if got := pod.Annotations[bulwarkinject.AnnotationTemplates]; got != bulwarkinject.TemplateGateway {
					t.Fatalf("the chart's pod asks for templates %q", got)
				}
				if c := findProxy(pod); c == nil || c.Image != bulwarkinject.AutoImage {
					t.Fatalf("the chart's pod has no istio-proxy with image auto: %+v", c)
				}
			}
			in := newInjectors(t, pod.Namespace, tc.values)
			theirs, err := in.istio(pod)
			if err != nil {
				t.Fatalf("istio: %v", err)
			}
			mutated, patched, err := in.bulwark(pod)
			if err != nil {
				t.Fatalf("bulwark: %v", err)
			}
			t.Run("patch gives the mutated pod", func(t *testing.T) {
				comparePodsAs(t, "Mutate", "patch", mutated, patched)
			})
			checkGateway(t, "istio", theirs)
			checkGateway(t, "bulwark", patched)

			normalizeEncoding(t, theirs)
			normalizeEncoding(t, patched)
			defaultVolumeSources(theirs)
			dropOverrides(theirs)
			fillGatewaySecurityContext(t, theirs, patched)
			comparePods(t, theirs, patched)
		})
	}
}

// checkGateway holds the injected pod to what makes it a gateway, so that
// the comparison cannot pass on two pods that are both wrong.
func checkGateway(t *testing.T, who string, pod *corev1.Pod) {
	t.Helper()
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("%s: a gateway has no init containers, got %v", who, containerNames(pod.Spec.InitContainers))
	}
	c := findProxy(pod)
	if c == nil {
		t.Fatalf("%s: no istio-proxy", who)
	}
	if len(c.Args) < 2 || c.Args[0] != "proxy" || c.Args[1] != "router" {
		t.Errorf("%s: istio-proxy args %v, want proxy router", who, c.Args)
	}
	if c.Image == "" || c.Image == bulwarkinject.AutoImage {
		t.Errorf("%s: istio-proxy image %q not resolved", who, c.Image)
	}
	for _, v := range []string{"PROXY_CONFIG", "CA_ADDR", "ISTIO_META_CLUSTER_ID", "ISTIO_META_WORKLOAD_NAME"} {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v }) {
			t.Errorf("%s: istio-proxy has no %s", who, v)
		}
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "istio-token" && v.Projected != nil }) {
		t.Errorf("%s: no projected istio-token volume", who)
	}
}

// fillGatewaySecurityContext gives Istio's gateway proxy the restricted
// settings Bulwark's template starts from, where neither Istio's template
// nor the pod sets them. Deliberate: Istio's gateway template sets only
// the user and group; Bulwark's starts from the restricted context of
// every istio-proxy (non-root, read-only root file system, no privilege
// escalation, all capabilities dropped), and the pod's own settings win
// over it as they win over Istio's. With the chart's defaults the two are
// the same.
func fillGatewaySecurityContext(t *testing.T, istio, ours *corev1.Pod) {
	t.Helper()
	ip, op := findProxy(istio), findProxy(ours)
	if ip == nil || op == nil {
		return
	}
	sc := ip.SecurityContext.DeepCopy()
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if sc.AllowPrivilegeEscalation == nil {
		sc.AllowPrivilegeEscalation = ptr(false)
	}
	if sc.Privileged == nil {
		sc.Privileged = ptr(false)
	}
	if sc.ReadOnlyRootFilesystem == nil {
		sc.ReadOnlyRootFilesystem = ptr(true)
	}
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = ptr(true)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	if sc.Capabilities.Drop == nil {
		sc.Capabilities.Drop = []corev1.Capability{"ALL"}
	}
	if d := cmp.Diff(sc, op.SecurityContext); d != "" {
		t.Errorf("gateway security context is not Istio's with the restricted defaults (-want +got):\n%s", d)
	}
	ip.SecurityContext = op.SecurityContext
}

// TestGatewayTemplateListsAgainstIstio gives both injectors the chart's
// pod with template lists an attacker or a typo could write. An unknown
// template is refused by both. Two templates are laid one over the other
// by Istio, which makes of a gateway pod something that is no gateway (a
// traffic-capturing istio-init, or a proxy that runs as a sidecar); Bulwark
// refuses the list and names the annotation.
func TestGatewayTemplateListsAgainstIstio(t *testing.T) {
	cases := map[string]struct {
		templates string
		// istioRefuses: Istio's injector refuses the pod too; otherwise
		// what it makes is checked not to be a gateway.
		istioRefuses bool
	}{
		"an unknown template":                {templates: "spire", istioRefuses: true},
		"an unknown template beside gateway": {templates: "gateway,spire", istioRefuses: true},
		"gateway then sidecar":               {templates: "gateway,sidecar"},
		"sidecar then gateway":               {templates: "sidecar,gateway"},
		"gateway then grpc-agent":            {templates: "gateway,grpc-agent"},
		"gateway twice is gateway":           {templates: "gateway, gateway"},
		"an empty entry beside gateway":      {templates: "gateway,", istioRefuses: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pod := gatewayChartPod(t, "istio-ingressgateway", "istio-ingress", nil)
			pod.Annotations[bulwarkinject.AnnotationTemplates] = tc.templates
			in := newInjectors(t, pod.Namespace, "")
			theirs, istioErr := in.istio(pod)
			_, _, ourErr := in.bulwark(pod)
			single := tc.templates == "gateway, gateway"
			switch {
			case tc.istioRefuses:
				if istioErr == nil {
					t.Errorf("istio injected %q", tc.templates)
				}
				if ourErr == nil || !strings.Contains(ourErr.Error(), bulwarkinject.AnnotationTemplates) {
					t.Errorf("bulwark: error %v, want a refusal naming %s", ourErr, bulwarkinject.AnnotationTemplates)
				}
			case single:
				if istioErr != nil || ourErr != nil {
					t.Fatalf("istio: %v; bulwark: %v; want both to inject the gateway", istioErr, ourErr)
				}
				checkGateway(t, "istio", theirs)
			default:
				if istioErr != nil {
					t.Fatalf("istio: %v", istioErr)
				}
				if notGateway(theirs) == "" {
					t.Errorf("istio made a gateway of %q; the refusal below is then no longer needed", tc.templates)
				}
				t.Logf("istio for %q: %s", tc.templates, notGateway(theirs))
				if ourErr == nil || !strings.Contains(ourErr.Error(), "cannot be combined") {
					t.Errorf("bulwark: error %v, want a refusal: templates cannot be combined", ourErr)
				}
			}
		})
	}
}

// notGateway says why an injected pod is not a gateway ("" if it is one).
func notGateway(pod *corev1.Pod) string {
	var why []string
	if len(pod.Spec.InitContainers) > 0 {
		why = append(why, fmt.Sprintf("init containers %v", containerNames(pod.Spec.InitContainers)))
	}
	c := findProxy(pod)
	switch {
	case c == nil:
		why = append(why, "no istio-proxy")
	case len(c.Args) < 2 || c.Args[1] != "router":
		why = append(why, fmt.Sprintf("istio-proxy args %v", c.Args))
	}
	if c != nil && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DISABLE_ENVOY" }) {
		why = append(why, "no Envoy (DISABLE_ENVOY)")
	}
	return strings.Join(why, "; ")
}
