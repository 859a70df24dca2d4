package helm

import (
	"cmp"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bulwark-mesh/bulwark/pkg/inject"
)

const gatewayRelease = "istio-ingressgateway"

// checkGatewayChart installs Istio's istio/gateway chart, read from the
// istio.io/istio module, with Helm beside this release (for its revision,
// as `helm install istio-ingressgateway istio/gateway --set revision=...`
// would), creates the Pod its Deployment describes as a ReplicaSet would
// (no controller-manager runs here), and checks that the release's /inject
// webhook admitted it and made it a gateway: Istio's gateway template
// applied, the chart's own container settings kept.
func (r *releaseRun) checkGatewayChart(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dir, err := istioModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	chrt, err := loader.Load(filepath.Join(dir, "manifests", "charts", "gateway"))
	if err != nil {
		t.Fatalf("load istio/gateway: %v", err)
	}
	ns := r.c.env.Namespace(t)
	cfg := helmConfig(t, r.c, ns)
	vals := map[string]any{}
	rev, _ := r.tc.values["revision"].(string)
	if rev != "" {
		vals["revision"] = rev
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = gatewayRelease, ns, time.Minute
	rel, err := install.Run(chrt, vals)
	if err != nil {
		t.Fatalf("helm install istio/gateway: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("istio/gateway release status %s", rel.Info.Status)
	}
	defer func() {
		if _, err := action.NewUninstall(cfg).Run(gatewayRelease); err != nil {
			t.Errorf("helm uninstall istio/gateway: %v", err)
		}
	}()
	dep, err := r.client.AppsV1().Deployments(ns).Get(ctx, gatewayRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the gateway chart's Deployment: %v", err)
	}

	began := time.Now()
	pod, err := r.client.CoreV1().Pods(ns).Create(ctx, replicaSetPod(dep), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the gateway chart's pod: %v", err)
	}
	t.Logf("gateway pod admitted and injected in %v", time.Since(began).Round(time.Millisecond))
	r.checkGatewayPod(t, dep, pod)
}

// replicaSetPod is the Pod a ReplicaSet of dep would create.
func replicaSetPod(dep *appsv1.Deployment) *corev1.Pod {
	const hash = "6b8f9d7c4"
	rs := dep.Name + "-" + hash
	pod := &corev1.Pod{
		ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
	pod.GenerateName = rs + "-"
	pod.Labels["pod-template-hash"] = hash
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
		UID: types.UID("9e2f4c1a-7b3d-4e5f-8a6b-000000000042"), Controller: ptr(true),
	}}
	return pod
}

func ptr[T any](v T) *T { return &v }

// checkGatewayPod holds the stored pod to the gateway template, with the
// values istiod injects with (the chart's injector ConfigMap).
func (r *releaseRun) checkGatewayPod(t *testing.T, dep *appsv1.Deployment, pod *corev1.Pod) {
	t.Helper()
	cm := r.injectorConfig(t)
	_, vals, err := inject.ParseConfig([]byte(cm["config"]), []byte(cm["values"]))
	if err != nil {
		t.Fatalf("the release's injector config: %v", err)
	}
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("init containers %v: a gateway has none", pod.Spec.InitContainers)
	}
	var proxies []corev1.Container
	for _, c := range pod.Spec.Containers {
		if c.Name == inject.ProxyContainerName {
			proxies = append(proxies, c)
		}
	}
	if len(proxies) != 1 {
		t.Fatalf("%d istio-proxy containers, want the chart's one", len(proxies))
	}
	proxy, chartProxy := proxies[0], dep.Spec.Template.Spec.Containers[0]
	if proxy.Image != vals.ProxyImage() {
		t.Errorf("istio-proxy image %q, want %q in place of %q", proxy.Image, vals.ProxyImage(), chartProxy.Image)
	}
	if len(proxy.Args) < 2 || proxy.Args[0] != "proxy" || proxy.Args[1] != "router" {
		t.Errorf("istio-proxy args %v, want proxy router", proxy.Args)
	}
	env := map[string]string{}
	for _, e := range proxy.Env {
		env[e.Name] = e.Value
	}
	var pc struct{ DiscoveryAddress string }
	if err := json.Unmarshal([]byte(env["PROXY_CONFIG"]), &pc); err != nil || pc.DiscoveryAddress != vals.DiscoveryAddress() {
		t.Errorf("PROXY_CONFIG %q (%v), want discoveryAddress %s", env["PROXY_CONFIG"], err, vals.DiscoveryAddress())
	}
	want := map[string]string{
		"CA_ADDR":                  vals.CAAddress(),
		"PILOT_CERT_PROVIDER":      "istiod",
		"ISTIO_META_CLUSTER_ID":    cmp.Or(vals.Global.MultiCluster.ClusterName, "Kubernetes"),
		"ISTIO_META_WORKLOAD_NAME": dep.Name,
		"ISTIO_META_OWNER":         "kubernetes://apis/apps/v1/namespaces/" + pod.Namespace + "/deployments/" + dep.Name,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("istio-proxy %s = %q, want %q", k, env[k], v)
		}
	}
	// The chart's own settings win over the template's.
	if !equality.Semantic.DeepEqual(proxy.Resources, chartProxy.Resources) {
		t.Errorf("resources %v, want the chart's %v", proxy.Resources, chartProxy.Resources)
	}
	sc := proxy.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1337 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("istio-proxy security context %+v, want user 1337 and the chart's restrictions", sc)
	}
	if psc := pod.Spec.SecurityContext; psc == nil ||
		!slices.Equal(psc.Sysctls, []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}) {
		t.Errorf("pod security context %+v, want the unprivileged port sysctl", psc)
	}
	var token *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if v.Name == "istio-token" {
			token = &pod.Spec.Volumes[i]
		}
	}
	if token == nil || token.Projected == nil || len(token.Projected.Sources) != 1 ||
		token.Projected.Sources[0].ServiceAccountToken == nil ||
		token.Projected.Sources[0].ServiceAccountToken.Audience != vals.Global.SDS.Token.Aud {
		t.Errorf("istio-token volume %+v, want a projected token for %s", token, vals.Global.SDS.Token.Aud)
	}
	if pod.Spec.ServiceAccountName != dep.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("service account %q, want the chart's %q", pod.Spec.ServiceAccountName, dep.Spec.Template.Spec.ServiceAccountName)
	}
	var st struct{ Containers, InitContainers []string }
	if err := json.Unmarshal([]byte(pod.Annotations["sidecar.istio.io/status"]), &st); err != nil ||
		!slices.Equal(st.Containers, []string{inject.ProxyContainerName}) || len(st.InitContainers) != 0 {
		t.Errorf("status annotation %q (%v)", pod.Annotations["sidecar.istio.io/status"], err)
	}
	if got := pod.Labels["istio"]; got != strings.TrimPrefix(gatewayRelease, "istio-") {
		t.Errorf("label istio=%q: Gateways select the pod by it", got)
	}
}

// injectorConfig is the injector ConfigMap the release's istiod reads.
func (r *releaseRun) injectorConfig(t *testing.T) map[string]string {
	t.Helper()
	for _, v := range r.deployment.Spec.Template.Spec.Volumes {
		if v.Name == "inject" && v.ConfigMap != nil {
			cm, err := r.client.CoreV1().ConfigMaps(r.deployment.Namespace).Get(context.Background(), v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return cm.Data
		}
	}
	t.Fatal("istiod's Deployment mounts no injector ConfigMap")
	return nil
}
