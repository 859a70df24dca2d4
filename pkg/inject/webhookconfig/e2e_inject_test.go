package webhookconfig

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/inject"
)

// TestInjectOptOutOnAPIServer: in a namespace labelled
// istio-injection=enabled, a pod labelled sidecar.istio.io/inject=false is
// stored as it was sent. The webhook here has no object selector, so the
// apiserver does send the pod and the injector itself declines it.
func TestInjectOptOutOnAPIServer(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	client := env.Client(t)
	authority := newCA(t)
	ns := env.Namespace(t)
	labelNamespace(t, client, ns, "istio-injection", "enabled")
	url := serveInjector(t, authority, inject.NewStore())
	createMutating(t, client, injectorConfig("istio-sidecar-injector-"+ns, "namespace.sidecar-injector.istio.io",
		url, authority, []string{ns}, &metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}}, nil))

	eventually(t, 30*time.Second, "the webhook injects an ordinary pod", func() bool {
		return hasContainer(createPod(t, client, ns), "istio-proxy")
	})

	pod := podSpec()
	pod.Labels["sidecar.istio.io/inject"] = "false"
	created, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create opted-out pod: %v", err)
	}
	stored, err := client.CoreV1().Pods(ns).Get(t.Context(), created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(stored); len(got) != 1 || got[0] != "app" || len(stored.Spec.InitContainers) != 0 {
		t.Errorf("opted-out pod stored with containers %v and %d init containers: want only app",
			got, len(stored.Spec.InitContainers))
	}
	// The apiserver's own admission adds the service account token volume;
	// none of the injector's may be there.
	for _, v := range stored.Spec.Volumes {
		switch v.Name {
		case "workload-socket", "credential-socket", "workload-certs", "istio-envoy", "istio-data",
			"istio-podinfo", "istio-token", "istiod-ca-cert":
			t.Errorf("opted-out pod has the injector's volume %s", v.Name)
		}
	}
	for _, k := range []string{inject.AnnotationStatus, inject.AnnotationRevision, "prometheus.io/port"} {
		if v, ok := stored.Annotations[k]; ok {
			t.Errorf("opted-out pod has annotation %s=%q", k, v)
		}
	}
	if len(stored.Labels) != len(pod.Labels) {
		t.Errorf("opted-out pod labels %v, want %v", stored.Labels, pod.Labels)
	}
}

// TestRevisionsOnAPIServer runs two injectors, the default one and the
// "canary" revision, each behind its own MutatingWebhookConfiguration with
// the selectors Istio's chart gives them, and checks that each namespace
// is injected by the injector it selects and by no other.
func TestRevisionsOnAPIServer(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	client := env.Client(t)
	authority := newCA(t)
	defaultNS, canaryNS := env.Namespace(t), env.Namespace(t)
	labelNamespace(t, client, defaultNS, "istio-injection", "enabled")
	labelNamespace(t, client, canaryNS, "istio.io/rev", "canary")

	canary := inject.NewStore()
	if err := canary.Update(nil, []byte(`{"revision": "canary"}`)); err != nil {
		t.Fatal(err)
	}
	defaultURL := serveInjector(t, authority, inject.NewStore())
	canaryURL := serveInjector(t, authority, canary)

	// Istio's object selector on both: a pod labelled
	// sidecar.istio.io/inject=false is never sent.
	optOut := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "sidecar.istio.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"},
	}}}
	namespaces := []string{defaultNS, canaryNS}
	createMutating(t, client, injectorConfig("istio-sidecar-injector-"+defaultNS, "namespace.sidecar-injector.istio.io",
		defaultURL, authority, namespaces,
		&metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}}, optOut))
	createMutating(t, client, injectorConfig("istio-sidecar-injector-canary-"+defaultNS, "rev.namespace.sidecar-injector.istio.io",
		canaryURL, authority, namespaces,
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "istio.io/rev", Operator: metav1.LabelSelectorOpIn, Values: []string{"canary"}},
			{Key: "istio-injection", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}, optOut))

	// The apiserver picks up new configurations asynchronously: wait
	// until both webhooks inject, then check fresh pods.
	for _, ns := range namespaces {
		eventually(t, 30*time.Second, "a pod in "+ns+" is injected", func() bool {
			return hasContainer(createPod(t, client, ns), "istio-proxy")
		})
	}
	for name, tc := range map[string]struct {
		ns, revision, caAddr string
	}{
		"a pod in an istio.io/rev=canary namespace is injected by the canary only": {
			canaryNS, "canary", "istiod-canary.istio-system.svc:15012",
		},
		"a pod in an istio-injection=enabled namespace is injected by the default only": {
			defaultNS, "default", "istiod.istio-system.svc:15012",
		},
	} {
		t.Run(name, func(t *testing.T) {
			pod := createPod(t, client, tc.ns)
			checkInjectedBy(t, pod, tc.revision, tc.caAddr)
		})
	}
}

func checkInjectedBy(t *testing.T, pod *corev1.Pod, revision, caAddr string) {
	t.Helper()
	proxies := 0
	var proxy corev1.Container
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == inject.ProxyContainerName {
			proxies++
			proxy = c
		}
	}
	if proxies != 1 {
		t.Fatalf("pod has %d istio-proxy containers, want 1", proxies)
	}
	var st struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal([]byte(pod.Annotations[inject.AnnotationStatus]), &st); err != nil {
		t.Fatalf("status annotation %q: %v", pod.Annotations[inject.AnnotationStatus], err)
	}
	if st.Revision != revision || pod.Annotations[inject.AnnotationRevision] != revision {
		t.Errorf("status revision %q, istio.io/rev annotation %q: want %q", st.Revision, pod.Annotations[inject.AnnotationRevision], revision)
	}
	got := ""
	for _, e := range proxy.Env {
		if e.Name == "CA_ADDR" {
			got = e.Value
		}
	}
	if got != caAddr {
		t.Errorf("CA_ADDR %q, want %q", got, caAddr)
	}
}

// injectorConfig is one injector's MutatingWebhookConfiguration, with the
// CA bundle set directly. Besides the given selector, the namespace
// selector names the test's namespaces, since the apiserver is shared.
func injectorConfig(name, webhook, url string, authority *ca.CA, namespaces []string,
	nsSel, objSel *metav1.LabelSelector,
) *admissionregistrationv1.MutatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(10)
	injectURL := url + "/inject"
	sel := nsSel.DeepCopy()
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces,
	})
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         webhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &injectURL, CABundle: authority.Current().PEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector:       sel,
			ObjectSelector:          objSel,
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			TimeoutSeconds:          &timeout,
		}},
	}
}

func createMutating(t *testing.T, client kubernetes.Interface, m *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := api.Create(t.Context(), m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), m.Name, metav1.DeleteOptions{}) })
}

func podSpec() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
}

// serveInjector serves one injector's /inject on loopback over TLS, with
// a certificate for "localhost" from authority.
func serveInjector(t *testing.T, authority *ca.CA, store *inject.Store) string {
	t.Helper()
	key, err := ca.GenerateKey(ca.KeyTypeECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	issued, err := authority.Sign(ca.SignRequest{PublicKey: key.Public(), DNSNames: []string{"localhost"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{PrivateKey: key, Leaf: issued.Leaf}
	for _, p := range issued.Chain[:len(issued.Chain)-1] {
		block, _ := pem.Decode([]byte(p))
		cert.Certificate = append(cert.Certificate, block.Bytes)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           inject.NewHandler(store, testLogger(t)),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve injector: %v", err)
		}
	})
	return fmt.Sprintf("https://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
}
