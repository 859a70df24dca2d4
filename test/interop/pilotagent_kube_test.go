package interop

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// apiTimeout bounds each group of requests to the apiserver.
const apiTimeout = 30 * time.Second

// createModel creates m through the Kubernetes API, as a cluster would hold
// it, for istiod to read without --configDir: the Istio CRDs, a running Pod
// per workload, the echo Service with the EndpointSlice the EndpointSlice
// controller would make for it, and the two policies as Istio resources.
// The test apiserver runs no kubelet and no controller-manager, so the
// pods' status and the slice are written by hand.
func createModel(t *testing.T, env *testenv.Env, m meshModel) ([]string, map[string]*corev1.Pod) {
	t.Helper()
	crds := chartCRDs(t)
	env.InstallCRDs(t, crds...)

	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	pods := map[string]*corev1.Pod{}
	for _, w := range []workload{m.Server, m.Client} {
		pods[w.Name] = createRunningPod(ctx, t, env, w)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: m.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{
				Name: "grpc", Port: echoPort, TargetPort: intstr.FromInt32(int32(m.ServerPort)),
			}},
		},
	}
	if _, err := client.CoreV1().Services(m.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service: %v", err)
	}
	server := pods[m.Server.Name]
	addressType := discoveryv1.AddressTypeIPv4
	if net.ParseIP(m.Server.IP).To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "echo-1", Namespace: m.Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: "echo"},
		},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{m.Server.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: server.Namespace, Name: server.Name, UID: server.UID,
			},
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr("grpc"), Port: ptr(int32(m.ServerPort)), Protocol: ptr(corev1.ProtocolTCP),
		}},
	}
	if _, err := client.DiscoveryV1().EndpointSlices(m.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create endpoint slice: %v", err)
	}

	security := istioClient(t, env).SecurityV1()
	strict := &securityv1.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: m.Namespace},
		Spec: securityv1beta1.PeerAuthentication{
			Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT},
		},
	}
	if _, err := security.PeerAuthentications(m.Namespace).Create(ctx, strict, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create peer authentication: %v", err)
	}
	allow := serverPolicy(m, "echo-callers", securityv1beta1.AuthorizationPolicy_ALLOW, m.Client)
	if _, err := security.AuthorizationPolicies(m.Namespace).Create(ctx, allow, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create authorization policy: %v", err)
	}
	return nil, pods
}

// createRunningPod creates w's service account and a pod for w, and writes
// the status a kubelet would once its container runs: Running, Ready, and
// w's address as the pod IP.
func createRunningPod(ctx context.Context, t *testing.T, env *testenv.Env, w workload) *corev1.Pod {
	t.Helper()
	core := env.Client(t).CoreV1()
	_, err := core.ServiceAccounts(w.Namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: w.ServiceAccount},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s: %v", w.ServiceAccount, err)
	}
	pod, err := core.Pods(w.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: w.Labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: w.ServiceAccount,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", w.Name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      w.IP,
		PodIPs:     []corev1.PodIP{{IP: w.IP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	pod, err = core.Pods(w.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set status of pod %s: %v", w.Name, err)
	}
	return pod
}

// hostAddress returns an IPv4 (else IPv6) address of an interface of this
// machine that is up and neither loopback nor link-local, for the server:
// the apiserver refuses such addresses in an EndpointSlice ("may not be in
// the loopback range"), as a cluster's pods never have them. The test fails
// on a machine without one rather than pass without having run.
func hostAddress(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatalf("list interfaces: %v", err)
	}
	var v6 string
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || !n.IP.IsGlobalUnicast() {
				continue
			}
			if n.IP.To4() != nil {
				return n.IP.String()
			}
			if v6 == "" {
				v6 = n.IP.String()
			}
		}
	}
	if v6 == "" {
		t.Fatal("no address other than loopback and link-local on this machine for an EndpointSlice to name")
	}
	return v6
}

// changePolicies shows that policies changed through the API reach the
// server within a bounded wait: the client's calls are refused with
// PermissionDenied once a change excludes it, and pass again once the
// change is undone.
func changePolicies(t *testing.T, env *testenv.Env, m meshModel, cli *app) {
	policies := istioClient(t, env).SecurityV1().AuthorizationPolicies(m.Namespace)
	want := okFrom(m.Server, m.Client)

	t.Run("the ALLOW policy changed to admit another service account refuses the client, and changed back admits it again", func(t *testing.T) {
		setPrincipal := func(w workload) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
			defer cancel()
			ap, err := policies.Get(ctx, "echo-callers", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get ALLOW policy: %v", err)
			}
			ap.Spec.Rules[0].From[0].Source.Principals = []string{principal(w)}
			if _, err := policies.Update(ctx, ap, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update ALLOW policy: %v", err)
			}
		}
		other := m.Client
		other.ServiceAccount = "someone-else"
		setPrincipal(other)
		if got, ok := cli.callUntilCode(t, codes.PermissionDenied, agentTimeout); !ok {
			t.Fatalf("call while the ALLOW policy admits %s: last result %q, want code PermissionDenied", principal(other), got)
		}
		setPrincipal(m.Client)
		if got := cli.callUntil(t, want, agentTimeout); got != want {
			t.Fatalf("call once the ALLOW policy admits the client again: last result %q, want %q", got, want)
		}
	})

	t.Run("a DENY policy for the client refuses its calls, and deleting it admits them again", func(t *testing.T) {
		// The server has an ALLOW policy too: both filters must be accepted.
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		deny := serverPolicy(m, "deny-client", securityv1beta1.AuthorizationPolicy_DENY, m.Client)
		if _, err := policies.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DENY policy: %v", err)
		}
		if got, ok := cli.callUntilCode(t, codes.PermissionDenied, agentTimeout); !ok {
			t.Fatalf("call under the DENY policy: last result %q, want code PermissionDenied", got)
		}
		if err := policies.Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete DENY policy: %v", err)
		}
		if got := cli.callUntil(t, want, agentTimeout); got != want {
			t.Fatalf("call after deleting the DENY policy: last result %q, want %q", got, want)
		}
	})
}

// serverPolicy is an AuthorizationPolicy on the echo server whose one rule
// matches calls from the from workload's service account.
func serverPolicy(m meshModel, name string, action securityv1beta1.AuthorizationPolicy_Action, from workload) *securityv1.AuthorizationPolicy {
	return &securityv1.AuthorizationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace},
		Spec: securityv1beta1.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": m.Server.Labels["app"]}},
			Action:   action,
			Rules: []*securityv1beta1.Rule{{
				From: []*securityv1beta1.Rule_From{{
					Source: &securityv1beta1.Source{Principals: []string{principal(from)}},
				}},
			}},
		},
	}
}

// istioClient is a clientset for the Istio resources, as the admin.
// NewForConfig copies the config it is given.
func istioClient(t testing.TB, env *testenv.Env) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("istio clientset: %v", err)
	}
	return c
}
