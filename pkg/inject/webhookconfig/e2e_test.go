package webhookconfig

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/inject"
	"github.com/bulwark-mesh/bulwark/pkg/inject/validate"
)

var (
	crdGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	authzGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
)

// TestAdmissionEndToEnd serves /inject and /validate over TLS with a
// certificate from a pkg/ca CA, lets the controller patch that CA's bundle
// into the webhook configurations, and has the real apiserver call them.
func TestAdmissionEndToEnd(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	client := env.Client(t)
	log := testLogger(t)
	injected, plain := env.Namespace(t), env.Namespace(t)
	labelNamespace(t, client, injected, "istio-injection", "enabled")

	authority := newCA(t)
	url, serving := serveWebhooks(t, authority)

	m, v := webhookPair(injected, url, []string{injected, plain}, true)
	createPair(t, env, m, v)
	start(t, Config{
		Client: client, Bundles: authority, MutatingName: m.Name, ValidatingName: v.Name,
		Ready: serving.Load, Logger: log,
	})
	want := string(authority.Current().PEM)
	eventually(t, 30*time.Second, "CA bundle patched and validation failing closed", func() bool {
		s := readState(t, client, m.Name, v.Name)
		return allEqual(s.mutatingCA, want) && allEqual(s.validatingCA, want) && allPolicies(s.validatingPolicy, "Fail")
	})

	t.Run("a pod in a labelled namespace gets istio-proxy", func(t *testing.T) {
		// The apiserver learns of new webhook configurations from an
		// informer: retry until a pod is injected.
		var pod *corev1.Pod
		eventually(t, 30*time.Second, "pod injected", func() bool {
			pod = createPod(t, client, injected)
			return hasContainer(pod, "istio-proxy")
		})
		stored, err := client.CoreV1().Pods(injected).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasContainer(stored, "istio-proxy") || !hasContainer(stored, "app") {
			t.Fatalf("stored pod containers %v, want app and istio-proxy", names(stored))
		}
	})
	t.Run("a pod in an unlabelled namespace is untouched", func(t *testing.T) {
		pod := createPod(t, client, plain)
		if got := names(pod); len(got) != 1 || got[0] != "app" || len(pod.Spec.InitContainers) != 0 {
			t.Fatalf("containers %v, init containers %d: want only app", got, len(pod.Spec.InitContainers))
		}
	})
	t.Run("an invalid AuthorizationPolicy is refused", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		installAuthzCRD(t, dyn)
		policies := dyn.Resource(authzGVR).Namespace(injected)
		var refusal error
		eventually(t, 30*time.Second, "invalid policy refused by /validate", func() bool {
			_, refusal = policies.Create(t.Context(), authzPolicy("deny-nothing-", map[string]any{"action": "DENY"}),
				metav1.CreateOptions{})
			return refusal != nil && strings.Contains(refusal.Error(), "spec.rules")
		})
		t.Logf("refused: %v", refusal)
		valid := authzPolicy("deny-all-", map[string]any{"action": "DENY", "rules": []any{map[string]any{}}})
		if _, err := policies.Create(t.Context(), valid, metav1.CreateOptions{}); err != nil {
			t.Fatalf("valid policy refused: %v", err)
		}
	})
	t.Run("a policy attached by targetRef is admitted with a warning", func(t *testing.T) {
		var warnings warningRecorder
		cfg := rest.CopyConfig(env.Config)
		cfg.WarningHandler = &warnings
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		installAuthzCRD(t, dyn)
		byRef := authzPolicy("by-ref-", map[string]any{
			"targetRef": map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
			"action":    "DENY", "rules": []any{map[string]any{}},
		})
		if _, err := dyn.Resource(authzGVR).Namespace(injected).Create(t.Context(), byRef, metav1.CreateOptions{}); err != nil {
			t.Fatalf("policy refused: %v", err)
		}
		if got := warnings.all(); len(got) != 1 || !strings.Contains(got[0], "spec.targetRef: attaches the policy to gateways or waypoints") {
			t.Fatalf("warnings %q", got)
		}
	})
}

// warningRecorder keeps the warnings the apiserver sends a client.
type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

func newCA(t *testing.T) *ca.CA {
	t.Helper()
	c, err := ca.New(ca.Config{
		TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"),
		Store:       ca.NewDirStore(t.TempDir()),
		Logger:      testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// serveWebhooks serves /inject and /validate on loopback with a
// certificate for "localhost" from authority. pkg/ca signs DNS names only,
// so the URL names localhost rather than 127.0.0.1.
func serveWebhooks(t *testing.T, authority *ca.CA) (string, *atomic.Bool) {
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
	mux := http.NewServeMux()
	mux.Handle("/inject", inject.NewHandler(inject.NewStore(), testLogger(t)))
	mux.Handle("/validate", validate.NewHandler(testLogger(t)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve webhooks: %v", err)
		}
	})
	var serving atomic.Bool
	serving.Store(true)
	return fmt.Sprintf("https://localhost:%d", ln.Addr().(*net.TCPAddr).Port), &serving
}

func labelNamespace(t *testing.T, client kubernetes.Interface, ns, key, value string) {
	t.Helper()
	n, err := client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[key] = value
	if _, err := client.CoreV1().Namespaces().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace: %v", err)
	}
}

func createPod(t *testing.T, client kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
	created, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod in %s: %v", ns, err)
	}
	return created
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

func names(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// installAuthzCRD installs a schemaless AuthorizationPolicy CRD, so that
// only /validate judges the spec, and waits until it is served.
func installAuthzCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "authorizationpolicies.security.istio.io"},
		"spec": map[string]any{
			"group": "security.istio.io",
			"scope": "Namespaced",
			"names": map[string]any{
				"kind": "AuthorizationPolicy", "listKind": "AuthorizationPolicyList",
				"plural": "authorizationpolicies", "singular": "authorizationpolicy",
			},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	ctx := t.Context()
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD: %v", err)
	}
	eventually(t, 30*time.Second, "CRD established and served", func() bool {
		got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil || !established(got) {
			return false
		}
		_, err = dyn.Resource(authzGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil
	})
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func authzPolicy(generateName string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.istio.io/v1",
		"kind":       "AuthorizationPolicy",
		"metadata":   map[string]any{"generateName": generateName},
		"spec":       spec,
	}}
}
