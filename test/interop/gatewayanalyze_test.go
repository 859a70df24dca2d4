package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiohelm "istio.io/istio/operator/pkg/helm"
	"istio.io/istio/operator/pkg/values"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// analyzerMessage is one message of `istioctl analyze -o json`.
type analyzerMessage struct {
	Code    string `json:"code"`
	Level   string `json:"level"`
	Origin  string `json:"origin"`
	Message string `json:"message"`
}

// TestIstioctlAnalyzeGateway installs a gateway scenario on the real
// apiserver twice, in two namespaces and one after the other, with
// Bulwark's istiod running: Istio's istio/gateway chart (its
// ServiceAccount, Service and the Pod of its Deployment), a Secret the
// Gateway's credentialName names, a Gateway terminating TLS with it and
// redirecting HTTP, a VirtualService routing to a Service, and a
// VirtualService bound to a Gateway that does not exist. The gateway pod is
// injected once by Bulwark's injector and once by Istio's (its
// gateway-injection-template.yaml); everything else is the same. Istio's
// istioctl analyze, run on each namespace, must report nothing about the
// Bulwark scenario that it does not report, modulo the namespace's name,
// about Istio's; and it must report the stray VirtualService in both, which
// shows the analyzers did look at the objects.
//
// Not parallel: the two scenarios' gateway pods carry the same labels, and
// a Gateway selects pods in every namespace.
func TestIstioctlAnalyzeGateway(t *testing.T) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS := env.Namespace(t)
	installGatewayCRDs(t, env)
	// A release name of this run's own: its pods' labels (istio: <release
	// without istio->) select no other test's Gateways, nor theirs these.
	release := "istio-" + istiodNS[strings.LastIndex(istiodNS, "-")+1:] + "gw"
	startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--serving-dns-names", caSAN)

	results := map[string][]string{}
	for _, who := range []string{"istio", "bulwark"} {
		ns := env.Namespace(t)
		remove := installAnalyzeScenario(t, env, release, ns, who)
		msgs := analyze(t, bins, env, istiodNS, ns)
		for _, m := range msgs {
			t.Logf("%s: %s [%s] (%s) %s", who, m.Level, m.Code, m.Origin, m.Message)
			results[who] = append(results[who], strings.Join([]string{m.Level, m.Code, m.Origin, m.Message}, " | "))
		}
		for i := range results[who] {
			results[who][i] = strings.ReplaceAll(results[who][i], ns, "<namespace>")
		}
		slices.Sort(results[who])
		stray := slices.ContainsFunc(msgs, func(m analyzerMessage) bool {
			return m.Code == "IST0101" && strings.Contains(m.Origin, "stray")
		})
		if !stray {
			t.Errorf("%s: istioctl analyze does not report the VirtualService bound to a missing Gateway: the objects were not analyzed", who)
		}
		remove()
	}
	for _, m := range results["bulwark"] {
		if !slices.Contains(results["istio"], m) {
			t.Errorf("istioctl analyze reports about Bulwark's scenario what it does not about Istio's: %s", m)
		}
	}
	t.Logf("istio:   %q\nbulwark: %q", results["istio"], results["bulwark"])
}

// installAnalyzeScenario creates the scenario in ns with the gateway pod
// injected by who's injector, and returns a function removing what could
// reach into another namespace: the pod (Gateways select pods anywhere)
// and the Gateway.
func installAnalyzeScenario(t *testing.T, env *testenv.Env, release, ns, who string) (remove func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	core := client.CoreV1()

	nsObj, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["istio-injection"] = "enabled"
	if _, err := core.Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The chart's ServiceAccount and Service, as helm would install them.
	dir, err := istioManifests()
	if err != nil {
		t.Fatal(err)
	}
	objs, _, err := istiohelm.Render(release, ns, "gateway",
		values.Map{"spec": map[string]any{"values": map[string]any{}, "installPackagePath": dir}}, nil)
	if err != nil {
		t.Fatalf("render istio/gateway: %v", err)
	}
	var selector map[string]string
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			var sa corev1.ServiceAccount
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &sa); err != nil {
				t.Fatal(err)
			}
			sa.Namespace = ns
			if _, err := core.ServiceAccounts(ns).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create service account: %v", err)
			}
		case "Service":
			var svc corev1.Service
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
				t.Fatal(err)
			}
			svc.Namespace = ns
			selector = svc.Spec.Selector
			if _, err := core.Services(ns).Create(ctx, &svc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create service: %v", err)
			}
		}
	}
	if len(selector) == 0 {
		t.Fatal("istio/gateway rendered no Service with a selector")
	}

	pod := gatewayChartPod(t, release, ns, nil)
	in := newInjectors(t, ns, "")
	var injected *corev1.Pod
	switch who {
	case "istio":
		injected, err = in.istio(pod)
	default:
		_, injected, err = in.bulwark(pod)
	}
	if err != nil {
		t.Fatalf("%s injection: %v", who, err)
	}
	injected.Namespace = ns
	created, err := core.Pods(ns).Create(ctx, injected, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s-injected pod: %v", who, err)
	}
	ip := hostAddress(t)
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := core.Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set pod status: %v", err)
	}

	root := catest.NewRoot(t)
	createTLSSecret(ctx, t, env, ns, "ingress-cert", servingLeaf(t, root, "a.example.com"))
	if _, err := core.Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "app"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service: %v", err)
	}

	networking := istioClient(t, env).NetworkingV1()
	gw := &networkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ns},
		Spec: networkingapi.Gateway{
			Selector: map[string]string{"istio": selector["istio"]},
			Servers: []*networkingapi.Server{
				simpleServer(443, "https", "a.example.com", "ingress-cert"),
				{
					Port:  &networkingapi.Port{Number: 80, Name: "http", Protocol: "HTTP"},
					Hosts: []string{"a.example.com"},
					Tls:   &networkingapi.ServerTLSSettings{HttpsRedirect: true},
				},
			},
		},
	}
	if _, err := networking.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create gateway: %v", err)
	}
	route := func(name, host, gateway string) *networkingv1.VirtualService {
		return &networkingv1.VirtualService{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: networkingapi.VirtualService{
				Hosts:    []string{host},
				Gateways: []string{gateway},
				Http: []*networkingapi.HTTPRoute{{
					Route: []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{
						Host: "app." + ns + ".svc.cluster.local", Port: &networkingapi.PortSelector{Number: 8080},
					}}},
				}},
			},
		}
	}
	for _, vs := range []*networkingv1.VirtualService{route("app", "a.example.com", "ingress"), route("stray", "b.example.com", "missing-gateway")} {
		if _, err := networking.VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create virtual service %s: %v", vs.Name, err)
		}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		if err := core.Pods(ns).Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Errorf("delete pod: %v", err)
		}
		if err := networking.Gateways(ns).Delete(ctx, gw.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete gateway: %v", err)
		}
	}
}

// analyze runs `istioctl analyze -o json` on ns, with istiodNS as Istio's
// namespace. istioctl exits non-zero when it reports warnings or errors;
// its JSON is what counts.
func analyze(t *testing.T, bins peers, env *testenv.Env, istiodNS, ns string) []analyzerMessage {
	t.Helper()
	args := []string{"analyze", "-n", ns, "-o", "json", "--kubeconfig", env.Kubeconfig, "--istioNamespace", istiodNS}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.istioctl, args...)
	cmd.Env = isolatedEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var msgs []analyzerMessage
	if err := json.Unmarshal(stdout.Bytes(), &msgs); err != nil {
		t.Fatalf("istioctl %s: %v (%v)\n%s%s", strings.Join(args, " "), runErr, err, stdout.String(), stderr.String())
	}
	return msgs
}
