package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// newGatewayAPIObjects are objects of the Gateway API kinds Istio reads
// that Bulwark reports, valid for the Gateway API's own CRDs.
var newGatewayAPIObjects = []struct {
	group, version, kind, name string
	spec                       map[string]any
}{
	{"gateway.networking.k8s.io", "v1", "ListenerSet", "listeners", map[string]any{
		"parentRef": map[string]any{"name": "gw"},
		"listeners": []any{map[string]any{"name": "http", "port": int64(8080), "protocol": "HTTP"}},
	}},
	{"gateway.networking.x-k8s.io", "v1alpha1", "XBackendTrafficPolicy", "traffic", map[string]any{
		"targetRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "echo"}},
	}},
	{"inference.networking.k8s.io", "v1", "InferencePool", "pool", map[string]any{
		"selector":          map[string]any{"matchLabels": map[string]any{"app": "model"}},
		"targetPorts":       []any{map[string]any{"number": int64(8000)}},
		"endpointPickerRef": map[string]any{"name": "epp", "port": map[string]any{"number": int64(9002)}},
	}},
}

// gatewayAPICRDs are the CRDs of newGatewayAPIObjects' kinds, as the
// Gateway API and its Inference Extension publish them, from the module
// cache (the versions istio.io/istio requires).
func gatewayAPICRDs(t *testing.T) []string {
	t.Helper()
	dir := func(module string) string {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			t.Fatalf("go list -m %s: %v", module, err)
		}
		return strings.TrimSpace(string(out))
	}
	api, inference := dir("sigs.k8s.io/gateway-api"), dir("sigs.k8s.io/gateway-api-inference-extension")
	return []string{
		filepath.Join(api, "config", "crd", "standard", "gateway.networking.k8s.io_listenersets.yaml"),
		filepath.Join(api, "config", "crd", "experimental", "gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml"),
		filepath.Join(inference, "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml"),
	}
}

// TestGatewayAPIKindsAndIstioctlInternalDebug runs istiod in Kubernetes
// mode with the Gateway API's own CRDs of ListenerSet,
// XBackendTrafficPolicy and InferencePool, which Istio reads and Bulwark
// does not. An object of each is admitted by istiod's validating webhook
// with a warning (through a webhook configuration of this test: the chart
// does not send Gateway API kinds), logged once, counted in
// bulwark_unsupported_config and listed at /debug/unsupported.
//
// Istio's istioctl then reads istiod's debug pages over xDS
// (`x internal-debug`, type istio.io/debug): with a token of istiod's
// namespace it gets /debug/unsupported's list, syncz and the list of
// pages, and for an unknown page the list; with a token of another
// namespace it is refused those pages.
func TestGatewayAPIKindsAndIstioctlInternalDebug(t *testing.T) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns := env.Namespace(t), env.Namespace(t)
	env.InstallCRDs(t, gatewayAPICRDs(t)...)
	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--serving-dns-names", "localhost")
	client := env.Client(t)
	for _, n := range []string{istiodNS, ns} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: n}}
		if _, err := client.CoreV1().ServiceAccounts(n).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("service account default in %s: %v", n, err)
		}
	}

	t.Run("istiod's webhook warns that each object is not honoured", func(t *testing.T) {
		warnings := createWithWarnings(t, env, p, ns)
		for _, o := range newGatewayAPIObjects {
			want := fmt.Sprintf("%s %s/%s is not honoured as written: the whole object: ", o.kind, ns, o.name)
			if !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
				t.Errorf("no admission warning %q in %q", want, warnings)
			}
		}
	})

	var listed unsupported.Report
	t.Run("each object is logged once, counted and listed at /debug/unsupported", func(t *testing.T) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			listed = debugUnsupported(t, p)
			if len(objectsOf(listed, ns)) == len(newGatewayAPIObjects) || time.Now().After(deadline) {
				break
			}
		}
		got := objectsOf(listed, ns)
		for _, o := range newGatewayAPIObjects {
			if !slices.Contains(got, o.kind+"."+o.group+"/"+o.name) {
				t.Errorf("/debug/unsupported lists %v, not %s %s", got, o.kind, o.name)
			}
			if n := strings.Count(p.logs.String(), fmt.Sprintf("kind=%s group=%s object=%s/%s", o.kind, o.group, ns, o.name)); n != 1 {
				t.Errorf("%s %s logged %d times, want once", o.kind, o.name, n)
			}
			series := fmt.Sprintf(`bulwark_unsupported_config{group=%q,kind=%q}`, o.group, o.kind)
			if v := metricValue(t, p.MonitoringAddr, series); v != 1 {
				t.Errorf("%s = %v, want 1", series, v)
			}
		}
	})

	t.Run("istioctl x internal-debug unsupported shows the list, to a caller of istiod's namespace", func(t *testing.T) {
		var page unsupported.Report
		out := istioctl(t, bins, env, p, istiodNS, "x", "internal-debug", "unsupported")
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("x internal-debug unsupported: %v\n%s", err, out)
		}
		if got, want := objectsOf(page, ns), objectsOf(listed, ns); !slices.Equal(got, want) {
			t.Errorf("istioctl shows %v, /debug/unsupported %v", got, want)
		}
		for _, k := range []policy.Kind{mustKind(t, "gateway.networking.k8s.io", "ListenerSet"), mustKind(t, "inference.networking.k8s.io", "InferencePool")} {
			if !slices.Contains(page.Watched, k.CRD()) {
				t.Errorf("istioctl's page does not name %s as watched: %v", k.CRD(), page.Watched)
			}
		}
	})

	t.Run("syncz and the list of pages, to a caller of istiod's namespace", func(t *testing.T) {
		var syncz []json.RawMessage
		if out := istioctl(t, bins, env, p, istiodNS, "x", "internal-debug", "syncz"); json.Unmarshal([]byte(out), &syncz) != nil {
			t.Errorf("x internal-debug syncz is not a JSON list:\n%s", out)
		}
		out := istioctl(t, bins, env, p, istiodNS, "x", "internal-debug", "--list")
		var pages []string
		if err := json.Unmarshal([]byte(out), &pages); err != nil {
			t.Fatalf("x internal-debug --list: %v\n%s", err, out)
		}
		for _, want := range []string{"config_dump", "syncz", "unsupported", "clusterz"} {
			if !slices.Contains(pages, want) {
				t.Errorf("x internal-debug --list: %v, no %s", pages, want)
			}
		}
		// An unknown page: istioctl says so and shows the list.
		out = istioctl(t, bins, env, p, istiodNS, "x", "internal-debug", "nosuchpage")
		if !strings.Contains(out, "check all supported internal debug commands") || !strings.Contains(out, `"unsupported"`) {
			t.Errorf("x internal-debug nosuchpage:\n%s", out)
		}
	})

	t.Run("a caller of another namespace is refused istiod's pages", func(t *testing.T) {
		for _, page := range []string{"unsupported", "syncz"} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, bins.istioctl, "x", "internal-debug", page,
				"--kubeconfig", env.Kubeconfig, "--istioNamespace", ns, "--xds-address", p.SecureGRPCAddr)
			cmd.Env = isolatedEnv()
			out, err := cmd.CombinedOutput()
			cancel()
			if err == nil || !strings.Contains(string(out), "PermissionDenied") || strings.Contains(string(out), `"objects"`) {
				t.Errorf("x internal-debug %s as namespace %s: %v\n%s", page, ns, err, out)
			}
		}
	})
}

func mustKind(t *testing.T, group, name string) policy.Kind {
	t.Helper()
	k, ok := policy.Lookup(group, name)
	if !ok {
		t.Fatalf("pkg/policy has no kind %s.%s", name, group)
	}
	return k
}

// objectsOf names the objects of ns in r, "Kind.group/name", sorted.
func objectsOf(r unsupported.Report, ns string) []string {
	var out []string
	for _, o := range r.Objects {
		if o.Namespace == ns {
			out = append(out, o.Kind+"."+o.Group+"/"+o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// debugUnsupported reads p's /debug/unsupported over HTTP.
func debugUnsupported(t *testing.T, p *istiod) unsupported.Report {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.MonitoringAddr + "/debug/unsupported")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	var rep unsupported.Report
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("/debug/unsupported: %d %s", resp.StatusCode, body)
	}
	return rep
}

// createWithWarnings sends the kinds of newGatewayAPIObjects in ns to
// p's /validate through a webhook configuration of the test's own, waits
// until the apiserver calls it, then creates the objects and returns the
// warnings the apiserver passed on.
func createWithWarnings(t *testing.T, env *testenv.Env, p *istiod, ns string) []string {
	t.Helper()
	_, port, err := net.SplitHostPort(p.HTTPSAddr)
	if err != nil {
		t.Fatal(err)
	}
	root := mustRead(t, publishedRoot(t, env, ns))
	url := "https://localhost:" + port + "/validate"
	fail, none, equivalent := admissionv1.Fail, admissionv1.SideEffectClassNone, admissionv1.Equivalent
	var rules []admissionv1.RuleWithOperations
	for _, o := range newGatewayAPIObjects {
		k := mustKind(t, o.group, o.kind)
		rules = append(rules, admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
			Rule:       admissionv1.Rule{APIGroups: []string{k.Group}, APIVersions: []string{"*"}, Resources: []string{k.Resource}},
		})
	}
	cfg := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "warnings-" + ns},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "warnings.bulwark.test",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &url, CABundle: root},
			Rules:                   rules,
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"kubernetes.io/metadata.name": ns,
			}},
		}},
	}
	hooks := env.Client(t).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := hooks.Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })

	rec := &warningRecorder{}
	rc := rest.CopyConfig(env.Config)
	rc.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	object := func(i int) (dynamic.ResourceInterface, *unstructured.Unstructured) {
		o := newGatewayAPIObjects[i]
		k := mustKind(t, o.group, o.kind)
		gvr := schema.GroupVersionResource{Group: k.Group, Version: o.version, Resource: k.Resource}
		return dyn.Resource(gvr).Namespace(ns), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.group + "/" + o.version, "kind": o.kind,
			"metadata": map[string]any{"name": o.name, "namespace": ns}, "spec": o.spec,
		}}
	}
	// The apiserver learns of webhook configurations from an informer: a
	// dry run, which webhooks without side effects are sent too, shows
	// when it calls istiod.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, obj := object(0)
		if _, err := res.Create(context.Background(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("dry run: %v", err)
		}
		if len(rec.take()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the apiserver never called istiod's webhook")
		}
	}
	for i := range newGatewayAPIObjects {
		res, obj := object(i)
		if _, err := res.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", obj.GetKind(), err)
		}
	}
	return rec.take()
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

// take returns the warnings kept and forgets them.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}
