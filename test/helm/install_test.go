package helm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

const releaseName = "istiod"

// leftovers are what stays in istiod's namespace after `helm uninstall`,
// as NOTES.txt and the chart's README say: objects istiod made at runtime,
// which Helm never owned.
var leftovers = []string{
	"ConfigMap/" + rootcert.ConfigMapName, // the trust bundle, in every namespace
	"Lease/" + rootcert.LeaseName,         // leader election of the replicas
	// The replica's own Lease (pkg/ca/replicalease): in a cluster it is
	// owned by istiod's pod and the garbage collector deletes it with the
	// pod; here istiod runs without a pod, and without a collector.
	"Lease/" + istiodPodName,
	"Secret/" + secretstore.SecretName, // the self-signed root, kept on purpose
}

// releaseCase is one kind of install: its values, and the labels that
// turn injection by it on for a namespace.
type releaseCase struct {
	values       map[string]any
	injectLabels map[string]string
	// istio: values is a values file of Istio's istiod chart; the upgrade,
	// which checks this chart's own keys, is left out.
	istio bool
}

var releaseCases = map[string]releaseCase{
	"default revision": {injectLabels: map[string]string{"istio-injection": "enabled"}},
	"canary revision": {
		values:       map[string]any{"revision": "canary"},
		injectLabels: map[string]string{"istio.io/rev": "canary"},
	},
}

// The chart installed by Helm into a real apiserver runs the real istiod
// with exactly the chart's RBAC: it becomes ready, creates its CA, publishes
// the trust bundle, patches both webhooks, and injects a pod through the
// chart's webhook, and the pod of Istio's istio/gateway chart installed
// beside it as a gateway. Then an upgrade changes the release and an
// uninstall leaves only what the chart documents.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	t.Parallel()
	// One after the other: every istiod publishes istio-ca-root-cert in
	// every namespace, so two with different roots would overwrite each
	// other's.
	cases := maps.Clone(releaseCases)
	cases["Istio's chart defaults"] = releaseCase{
		values:       istioValueSets(t)["chart defaults"],
		injectLabels: map[string]string{"istio-injection": "enabled"},
		istio:        true,
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newReleaseRun(t, tc)
			r.install(t)
			r.runIstiod(t)
			r.checkTrust(t)
			r.checkInjection(t)
			r.checkGatewayChart(t)
			r.checkIstioctlAnalyze(t)
			if !tc.istio {
				r.upgrade(t)
			}
			r.checkIstiodNeverRefused(t)
			r.istiod.stop(t)
			r.uninstall(t)
		})
	}
}

// releaseRun is one release's life in a namespace of its own.
type releaseRun struct {
	tc     releaseCase
	c      *cluster
	client kubernetes.Interface
	cfg    *action.Configuration
	chart  *chart.Chart
	ns     string
	// before is what the namespace held before the install.
	before []string
	// webhookAddr is where istiod serves the webhooks; vals point the
	// chart's webhooks at it.
	webhookAddr string
	vals        map[string]any
	// manifests are the objects of every revision of the release.
	manifests []*unstructured.Unstructured
	// deployment is istiod's Deployment as installed.
	deployment *appsv1.Deployment
	istiod     *istiodProcess
	// app is a namespace with injection by this release turned on;
	// rootPEM the trust bundle istiod published there.
	app     string
	rootPEM string
}

func newReleaseRun(t *testing.T, tc releaseCase) *releaseRun {
	t.Helper()
	c := getCluster(t)
	chrt, err := LoadChart()
	if err != nil {
		t.Fatal(err)
	}
	r := &releaseRun{tc: tc, c: c, client: c.env.Client(t), chart: chrt, ns: c.env.Namespace(t)}
	r.before = namespaceContents(t, c, r.ns)
	r.cfg = helmConfig(t, c, r.ns)
	// istiod runs outside the cluster: the apiserver calls it by URL. Its
	// serving certificate names localhost, not 127.0.0.1.
	r.webhookAddr = freeAddr(t)
	_, port, _ := strings.Cut(r.webhookAddr, ":")
	r.vals = r.values(map[string]any{"webhook": map[string]any{"url": "https://localhost:" + port}})
	if tc.istio {
		r.vals = inNamespace(r.vals, r.ns)
	}
	return r
}

// values are the case's values with vals laid over them.
func (r *releaseRun) values(vals map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r.tc.values {
		out[k] = v
	}
	for k, v := range vals {
		out[k] = v
	}
	return out
}

func (r *releaseRun) install(t *testing.T) {
	t.Helper()
	began := time.Now()
	install := action.NewInstall(r.cfg)
	install.ReleaseName, install.Namespace, install.Timeout = releaseName, r.ns, time.Minute
	rel, err := install.Run(r.chart, r.vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install: %v", time.Since(began).Round(time.Millisecond))
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s", rel.Info.Status)
	}
	objs := mustParse(t, rel.Manifest)
	r.manifests = append(r.manifests, objs...)
	for _, obj := range objs {
		live, err := r.get(t, obj)
		if err != nil {
			t.Errorf("%s not created: %v", describe(obj), err)
			continue
		}
		if obj.GetKind() == "Deployment" {
			r.deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, r.deployment); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.deployment == nil {
		t.Fatal("the release has no Deployment")
	}
	if !strings.Contains(rel.Info.Notes, "KEEPS") || !strings.Contains(rel.Info.Notes, secretstore.SecretName) {
		t.Errorf("NOTES.txt does not say that %s is kept on uninstall:\n%s", secretstore.SecretName, rel.Info.Notes)
	}
}

// runIstiod runs istiod as the chart's Deployment would, as the chart's
// ServiceAccount, and waits until it is ready.
func (r *releaseRun) runIstiod(t *testing.T) {
	t.Helper()
	dep := r.deployment
	injectDir := writeInjectorConfig(t, r.client, dep)
	token := r.c.env.ServiceAccountToken(t, r.ns, dep.Spec.Template.Spec.ServiceAccountName, nil, nil)
	kubeconfig := r.c.env.KubeconfigForToken(t, token)
	buildIstiod(t) // not part of the start-up time below
	started := time.Now()
	r.istiod = startIstiod(t, dep, kubeconfig, injectDir, r.webhookAddr)
	waitUntil(t, "istiod ready", 2*time.Minute, r.istiod.ready)
	t.Logf("istiod ready %v after start", time.Since(started).Round(time.Millisecond))
}

// checkTrust: istiod made its CA Secret outside Helm, published the trust
// bundle in a new namespace, and put it in both webhook configurations.
func (r *releaseRun) checkTrust(t *testing.T) {
	t.Helper()
	secret, err := r.client.CoreV1().Secrets(r.ns).Get(context.Background(), secretstore.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", secretstore.SecretName, err)
	}
	if owner := secret.Annotations["meta.helm.sh/release-name"]; owner != "" {
		t.Errorf("%s is owned by release %q; istiod must create it outside Helm", secretstore.SecretName, owner)
	}
	r.app = r.c.env.Namespace(t)
	labelNamespace(t, r.client, r.app, r.tc.injectLabels)
	r.rootPEM = waitRootCert(t, r.client, r.app)
	waitWebhooksPatched(t, r.client, r.deployment, r.rootPEM, "after install")
}

// checkInjection creates a pod where the chart's webhook calls istiod.
func (r *releaseRun) checkInjection(t *testing.T) {
	t.Helper()
	began := time.Now()
	pod := createPod(t, r.client, r.app)
	t.Logf("pod injected through the chart's webhook in %v", time.Since(began).Round(time.Millisecond))
	var names []string
	for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		names = append(names, ctr.Name)
	}
	if !slices.Contains(names, "istio-proxy") || pod.Annotations["sidecar.istio.io/status"] == "" {
		t.Errorf("pod not injected: containers %v, annotations %v", names, pod.Annotations)
	}
	// The proxy's image is the values' global.hub and global.tag.
	global, _ := r.tc.values["global"].(map[string]any)
	if hub, tag := global["hub"], global["tag"]; hub != nil && tag != nil {
		want := fmt.Sprintf("%v/proxyv2:%v", hub, tag)
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			if ctr.Name == "istio-proxy" && ctr.Image != want {
				t.Errorf("istio-proxy image %s, want %s", ctr.Image, want)
			}
		}
	}
}

// upgrade changes values: two replicas (which adds a PodDisruptionBudget)
// and other resources.
func (r *releaseRun) upgrade(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	began := time.Now()
	upgrade := action.NewUpgrade(r.cfg)
	upgrade.Namespace, upgrade.Timeout = r.ns, time.Minute
	vals := r.values(map[string]any{
		"webhook":      r.vals["webhook"],
		"replicaCount": 2,
		"resources":    map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}},
	})
	rel, err := upgrade.Run(releaseName, r.chart, vals)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	t.Logf("helm upgrade: %v", time.Since(began).Round(time.Millisecond))
	r.manifests = append(r.manifests, mustParse(t, rel.Manifest)...)
	if rel.Version != 2 || rel.Info.Status != release.StatusDeployed {
		t.Errorf("after upgrade: release version %d, status %s", rel.Version, rel.Info.Status)
	}
	name := r.deployment.Name
	dep, err := r.client.AppsV1().Deployments(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limits := dep.Spec.Template.Spec.Containers[0].Resources.Limits
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 || limits.Memory().String() != "1Gi" {
		t.Errorf("after upgrade: replicas %v, memory limit %s; want 2 and 1Gi", dep.Spec.Replicas, limits.Memory())
	}
	if _, err := r.client.PolicyV1().PodDisruptionBudgets(r.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("after upgrade to 2 replicas: PodDisruptionBudget: %v", err)
	}
	// Helm's three-way merge must keep what istiod wrote: the caBundle,
	// and (once istiod sees the change) failurePolicy Fail.
	waitWebhooksPatched(t, r.client, dep, r.rootPEM, "after upgrade")
}

// checkIstiodNeverRefused: istiod's log holds no refusal by the apiserver,
// so the chart's RBAC covers everything istiod did.
func (r *releaseRun) checkIstiodNeverRefused(t *testing.T) {
	t.Helper()
	if lines := r.istiod.forbiddenLines(20); len(lines) > 0 {
		t.Errorf("the apiserver refused istiod with the chart's RBAC:\n%s", strings.Join(lines, "\n"))
	}
}

// uninstall removes the release and checks that exactly the documented
// leftovers remain: istiod's own objects in its namespace, the trust
// bundle elsewhere, and the CRDs.
func (r *releaseRun) uninstall(t *testing.T) {
	t.Helper()
	began := time.Now()
	if _, err := action.NewUninstall(r.cfg).Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall: %v", time.Since(began).Round(time.Millisecond))
	for _, obj := range r.manifests {
		if _, err := r.get(t, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there after uninstall (%v)", describe(obj), err)
		}
	}
	var left []string
	for _, o := range namespaceContents(t, r.c, r.ns) {
		if !slices.Contains(r.before, o) {
			left = append(left, o)
		}
	}
	if !slices.Equal(left, leftovers) {
		t.Errorf("after uninstall %s holds %v; want exactly %v", r.ns, left, leftovers)
	}
	t.Logf("left after uninstall in %s: %v", r.ns, left)
	if _, err := r.client.CoreV1().ConfigMaps(r.app).Get(context.Background(), rootcert.ConfigMapName, metav1.GetOptions{}); err != nil {
		t.Errorf("%s in %s after uninstall: %v", rootcert.ConfigMapName, r.app, err)
	}
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		if _, err := r.get(t, crd); err != nil {
			t.Errorf("CRD %s after uninstall: %v", crd.GetName(), err)
		}
	}
}

// get reads obj's live copy.
func (r *releaseRun) get(t *testing.T, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	t.Helper()
	res, _, err := r.c.resourceFor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return res.Get(context.Background(), obj.GetName(), metav1.GetOptions{})
}
