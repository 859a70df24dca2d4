package migrate

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

const timeout = 30 * time.Second

// cluster is the package's apiserver, with the CRDs of every Istio kind.
type cluster struct {
	env    *testenv.Env
	client kubernetes.Interface
	dyn    dynamic.Interface
	meta   metadata.Interface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := testenv.Get(t)
	chart, err := filepath.Glob("../../charts/istiod/crds/*.yaml")
	if err != nil || len(chart) == 0 {
		t.Fatalf("chart CRDs %v: %v", chart, err)
	}
	env.InstallCRDs(t, append(chart, unsupportedtest.CRDs(t))...)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{env: env, client: env.Client(t), dyn: dyn, meta: meta}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func (c *cluster) check(t *testing.T, cfg Config) *Report {
	t.Helper()
	cfg.Client, cfg.Dynamic, cfg.Metadata = c.client, c.dyn, c.meta
	r, err := Check(ctxFor(t), cfg)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	var b strings.Builder
	r.WriteText(&b)
	t.Logf("report:\n%s", b.String())
	return r
}

// istiod installs an Istio istiod of revision rev in ns as Istio's chart
// names and labels it, with its mesh ConfigMap of trustDomain, and
// removes them when t ends (no controller-manager collects them).
func (c *cluster) istiod(t *testing.T, ns, rev, trustDomain string) {
	t.Helper()
	ctx := ctxFor(t)
	name, mesh := "istiod", "istio"
	if rev != "default" {
		name, mesh = name+"-"+rev, mesh+"-"+rev
	}
	labels := map[string]string{"app": "istiod", "istio.io/rev": rev, "istio": "pilot"}
	one := int32(1)
	_, err := c.client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.24.0"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	_, err = c.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: mesh},
		Data:       map[string]string{"mesh": "defaultConfig:\n  discoveryAddress: " + name + "." + ns + ".svc:15012\ntrustDomain: " + trustDomain + "\n"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// meshDoc replaces the mesh config of the Istio istiod of revision rev in
// ns (installed by istiod) with doc.
func (c *cluster) meshDoc(t *testing.T, ns, rev, doc string) {
	t.Helper()
	name := "istio"
	if rev != "default" {
		name += "-" + rev
	}
	_, err := c.client.CoreV1().ConfigMaps(ns).Update(ctxFor(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"mesh": doc},
	}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// injector installs a MutatingWebhookConfiguration with the selectors
// Istio's chart gives revision rev (and, for "default", the
// istio-injection label), removed when t ends.
func (c *cluster) injector(t *testing.T, name, ns, rev string, labels map[string]string) {
	t.Helper()
	in := func(k string, v ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: v}
	}
	absent := func(k string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	notFalse := metav1.LabelSelectorRequirement{Key: "sidecar.istio.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}
	svcName := "istiod"
	if rev != "default" {
		svcName += "-" + rev
	}
	hook := func(prefix string, nsSel, objSel []metav1.LabelSelectorRequirement) admissionv1.MutatingWebhook {
		none := admissionv1.SideEffectClassNone
		return admissionv1.MutatingWebhook{
			Name:                    prefix + "sidecar-injector.istio.io",
			ClientConfig:            admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: svcName}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: nsSel},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: objSel},
		}
	}
	hooks := []admissionv1.MutatingWebhook{
		hook("rev.namespace.", []metav1.LabelSelectorRequirement{in("istio.io/rev", rev), absent("istio-injection")}, []metav1.LabelSelectorRequirement{notFalse}),
		hook("rev.object.", []metav1.LabelSelectorRequirement{absent("istio.io/rev"), absent("istio-injection")}, []metav1.LabelSelectorRequirement{notFalse, in("istio.io/rev", rev)}),
	}
	if rev == "default" {
		hooks = append(hooks, hook("namespace.", []metav1.LabelSelectorRequirement{in("istio-injection", "enabled")}, []metav1.LabelSelectorRequirement{notFalse}))
	}
	_, err := c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctxFor(t), &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Webhooks:   hooks,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// secret creates Secret name in ns holding data.
func (c *cluster) secret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	_, err := c.client.CoreV1().Secrets(ns).Create(ctxFor(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// istioCASecret is istio-ca-secret as Istio's istiod writes it for a
// self-signed root: the root signs, root-cert.pem and the chain empty.
func istioCASecret(root *catest.Cert) map[string][]byte {
	return map[string][]byte{
		"ca-cert.pem": root.CertPEM, "ca-key.pem": root.KeyPEM,
		"cert-chain.pem": {}, "key.pem": {}, "root-cert.pem": {},
	}
}

// labelledNamespace makes a namespace with labels.
func (c *cluster) labelledNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := c.env.Namespace(t)
	n, err := c.client.CoreV1().Namespaces().Get(ctxFor(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = labels
	if _, err := c.client.CoreV1().Namespaces().Update(ctxFor(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// injectedPod creates a pod as an injector leaves it: the status
// annotation, the canonical-name label (which every injection template
// sets, unlike tlsMode) and an istio-proxy container, with
// PROXY_CONFIG_XDS_AGENT=true when pcds.
func (c *cluster) injectedPod(t *testing.T, ns, name, rev string, pcds bool) {
	t.Helper()
	proxy := corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.24.0",
		Env: []corev1.EnvVar{{Name: "ISTIO_META_CLUSTER_ID", Value: "Kubernetes"}}}
	if pcds {
		proxy.Env = append(proxy.Env, corev1.EnvVar{Name: "PROXY_CONFIG_XDS_AGENT", Value: "true"})
	}
	_, err := c.client.CoreV1().Pods(ns).Create(ctxFor(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"app": name, "service.istio.io/canonical-name": "app", "istio.io/rev": rev},
			Annotations: map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"],"revision":"` + rev + `"}`},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}, proxy}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) envoyFilter(t *testing.T, ns, name string) {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"configPatches": []any{}},
	}}
	if _, err := c.dyn.Resource(gvr).Namespace(ns).Create(ctxFor(t), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := c.dyn.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete EnvoyFilter: %v", err)
		}
	})
}

func blocking(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Blocking {
			out = append(out, f.Text)
		}
	}
	return out
}

func hasFinding(r *Report, blocks bool, substr string) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Blocking == blocks && strings.Contains(f.Text, substr) })
}
