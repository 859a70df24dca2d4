package interop

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	securityv1beta1 "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// The echo Service of TestPilotAgentEnvoy: HTTP port 80 to the pod's 8080.
// No traffic flows (the stand-in opens no listener), so the ports need
// not be free.
const (
	envoyServicePort = 80
	envoyTargetPort  = 8080
	// envoyWait bounds each wait for the agent and the stand-in: readiness
	// takes a CSR and the whole warming sequence on a busy machine.
	envoyWait = 60 * time.Second
)

// TestPilotAgentEnvoy runs Istio's pilot-agent, unmodified and in sidecar
// mode (Envoy enabled, not proxyless), against istiod in Kubernetes mode on
// the test apiserver, with envoystandin as the Envoy binary
// (ProxyConfig.binaryPath). The stand-in reads the bootstrap the agent
// wrote and speaks Envoy's protocol to the agent's xDS proxy (Delta ADS)
// and SDS server; the agent gets the workload certificate from istiod over
// the CSR API with the pod's TokenRequest token.
//
// It shows: the certificate the agent serves over SDS is istiod's and
// names the pod's service account; CDS, EDS, LDS, RDS and the secrets
// default and ROOTCA arrive in Envoy's order and are all ACKed; Istio's
// simulator, run on what the stand-in received, routes inbound mTLS and
// outbound HTTP where Istio would; the agent's readiness turns 200; an
// AuthorizationPolicy created through the API puts RBAC on the stand-in's
// inbound chains and deleting it takes it off, and a Telemetry its
// filtered access log; while a root rotation
// prepares, the stand-in's ROOTCA holds the old root and the new; and a StatefulSet-style
// restart (the agent stopped, the pod deleted and created again under its
// name with a new UID and token) reconnects and gets the config again.
//
// Not parallel, for the reason TestPilotAgentProxylessGRPC gives.
func TestPilotAgentEnvoy(t *testing.T) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns := env.Namespace(t), env.Namespace(t)
	w := workload{Name: "echo-0", Namespace: ns, ServiceAccount: "echo", IP: hostAddress(t),
		Labels: map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}}

	pod, svc := createEnvoyModel(t, env, w)
	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--serving-dns-names", caSAN, "--root-rotation-tick=500ms")
	rootFile := publishedRoot(t, env, ns)
	_, port, err := net.SplitHostPort(p.SecureGRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	discovery := "localhost:" + port

	start := time.Now()
	token := env.ServiceAccountToken(t, ns, w.ServiceAccount, []string{"istio-ca"}, pod)
	a := startEnvoyAgent(t, bins, w, token, rootFile, discovery)
	a.waitReady(t, envoyWait)
	t.Logf("pilot-agent with the stand-in ready %v after start", time.Since(start).Round(time.Millisecond))
	st := a.waitState(t, envoyWait, configComplete)

	t.Run("the workload certificate the agent serves over SDS is istiod's and names the pod's service account", func(t *testing.T) {
		checkStandinSecrets(t, st, w, rootFile)
	})
	t.Run("CDS, EDS, LDS and RDS arrive over Delta ADS in Envoy's order, all ACKed and none NACKed", func(t *testing.T) {
		checkStandinXDS(t, st)
	})
	t.Run("the endpoints name the pod with Istio's mTLS label", func(t *testing.T) {
		checkStandinEndpoints(t, st, w, svc)
	})
	t.Run("Istio's simulator routes inbound mTLS and outbound HTTP on what the stand-in received", func(t *testing.T) {
		checkStandinSimulation(t, st, w, svc)
	})
	t.Run("Istio's telemetry filters reach the stand-in: metadata exchange and istio.stats on every inbound chain, the exchange on outbound clusters", func(t *testing.T) {
		checkStandinTelemetry(t, st)
	})
	t.Run("istiod's syncz shows the sidecar's stream with every type ACKed", func(t *testing.T) {
		waitSynced(t, p.MonitoringAddr, w)
	})
	t.Run("an AuthorizationPolicy created through the API puts RBAC on the inbound chains, and deleting it takes it off", func(t *testing.T) {
		changeEnvoyPolicy(t, env, a, w)
	})
	t.Run("a Telemetry created through the API puts its CEL-filtered access log on the stand-in's inbound chains, and deleting it takes it off", func(t *testing.T) {
		changeEnvoyTelemetry(t, env, a, w)
	})
	t.Run("a DestinationRule's credentialName Secret reaches the stand-in over ADS through the agent, one its service account may not get does not, and deleting the rule drops them", func(t *testing.T) {
		originateWithCredential(t, env, a, w, svc, p.MonitoringAddr)
	})
	t.Run("istioctl proxy-status and version read istiod over xDS, scoped to the caller's namespace", func(t *testing.T) {
		checkIstioctl(t, env, bins, p, istiodNS, w, a)
	})
	rotatedRoots := filepath.Join(t.TempDir(), "root-cert.pem")
	t.Run("while a root rotation prepares, the agent gives Envoy a ROOTCA with both roots", func(t *testing.T) {
		if err := os.WriteFile(rotatedRoots, checkRotationROOTCA(t, env, p, istiodNS, a), 0o600); err != nil {
			t.Fatal(err)
		}
		rootFile = rotatedRoots
	})
	t.Run("a StatefulSet-style restart reconnects with a new pod's token and gets the config again", func(t *testing.T) {
		restartEnvoyPod(t, env, bins, a, w, svc, rootFile, discovery)
		waitSynced(t, p.MonitoringAddr, w)
	})
}

// checkRotationROOTCA starts a root rotation (the default grace keeps it
// in prepare) and waits for the stand-in's ROOTCA to hold the old root
// and the new one, with default still verifying to it. It returns the
// namespace's istio-ca-root-cert, holding both.
func checkRotationROOTCA(t *testing.T, env *testenv.Env, p *istiod, istiodNS string, a *envoyAgent) []byte {
	t.Helper()
	runIstiodCommand(t, p, "ca", "rotate", "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS)
	r := waitRotation(t, env, istiodNS, "prepare", func(r *ca.Rotation) bool { return r.Phase == ca.PhasePrepare })
	started := time.Now()
	a.waitState(t, envoyWait, func(st *standinState) string {
		root, def := st.Secrets["ROOTCA"], st.Secrets["default"]
		if root == nil || def == nil {
			return "no ROOTCA or default"
		}
		var old, new bool
		for _, c := range parseCerts(t, []byte(root.TrustedCA)) {
			old = old || bytes.Equal(c.Raw, r.OldRoot)
			new = new || bytes.Equal(c.Raw, r.NewRoot)
		}
		if !old || !new {
			return fmt.Sprintf("ROOTCA holds the old root: %v, the new: %v", old, new)
		}
		if def.VerifiedBy != "ROOTCA" {
			return "default does not verify to ROOTCA: " + def.VerifyError
		}
		return ""
	})
	t.Logf("rotation prepared → the stand-in's ROOTCA holds both roots: %v", time.Since(started).Round(time.Millisecond))
	for deadline := time.Now().Add(envoyWait); ; time.Sleep(100 * time.Millisecond) {
		roots := mustRead(t, publishedRoot(t, env, a.Workload.Namespace))
		if len(parseCerts(t, roots)) == 2 {
			return roots
		}
		if time.Now().After(deadline) {
			t.Fatal("istio-ca-root-cert does not hold both roots")
		}
	}
}

// createEnvoyModel creates, through the API, the Istio CRDs, w's running
// pod, the echo Service selecting it (with the ClusterIP the apiserver
// assigns), the EndpointSlice naming the pod, and STRICT mTLS for the
// namespace.
func createEnvoyModel(t *testing.T, env *testenv.Env, w workload) (*corev1.Pod, *corev1.Service) {
	t.Helper()
	crds := chartCRDs(t)
	env.InstallCRDs(t, crds...)
	telemetryCRD(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	pod := createRunningPod(ctx, t, env, w)
	svc, err := client.CoreV1().Services(w.Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: w.Labels["app"], Namespace: w.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": w.Labels["app"]},
			Ports: []corev1.ServicePort{{
				Name: "http", Port: envoyServicePort, TargetPort: intstr.FromInt32(envoyTargetPort),
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Create(ctx, envoySlice(w, pod), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create endpoint slice: %v", err)
	}
	strict := &securityv1.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: w.Namespace},
		Spec: securityv1beta1.PeerAuthentication{
			Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT},
		},
	}
	if _, err := istioClient(t, env).SecurityV1().PeerAuthentications(w.Namespace).Create(ctx, strict, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create peer authentication: %v", err)
	}
	return pod, svc
}

// envoySlice is the EndpointSlice the EndpointSlice controller would
// write for the echo Service with pod as its one endpoint.
func envoySlice(w workload, pod *corev1.Pod) *discoveryv1.EndpointSlice {
	addressType := discoveryv1.AddressTypeIPv4
	if net.ParseIP(w.IP).To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.Labels["app"] + "-1", Namespace: w.Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: w.Labels["app"]},
		},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{w.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr("http"), Port: ptr(int32(envoyTargetPort)), Protocol: ptr(corev1.ProtocolTCP),
		}},
	}
}

// restartEnvoyPod replaces the pod as a StatefulSet controller would: the
// agent is stopped (SIGTERM: it drains the stand-in and kills it), the pod
// deleted, a pod of the same name created with a new UID, the slice
// pointed at it, and a new agent started with a token bound to the new
// pod. The new agent must become ready and its stand-in get the config.
func restartEnvoyPod(t *testing.T, env *testenv.Env, bins peers, old *envoyAgent, w workload, svc *corev1.Service, rootFile, discovery string) {
	oldState := old.state(t)
	stopped := time.Now()
	stopProcess(t, old.proc.cmd, old.proc.exited)
	t.Logf("old pilot-agent exited %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	oldState = old.state(t)
	if n := oldState.Admin["POST /drain_listeners?inboundonly&graceful"]; n == 0 {
		t.Errorf("the agent did not drain the stand-in on SIGTERM; admin requests: %v", oldState.Admin)
	}
	if processAlive(oldState.PID) {
		t.Errorf("the old stand-in (pid %d) outlived its agent", oldState.PID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	oldPod, err := client.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	if err := client.CoreV1().Pods(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	for {
		_, err := client.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s not gone: %v", w.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pod := createRunningPod(ctx, t, env, w)
	if pod.UID == oldPod.UID {
		t.Fatalf("the new pod has the old UID %s", pod.UID)
	}
	sliceClient := client.DiscoveryV1().EndpointSlices(w.Namespace)
	slice, err := sliceClient.Get(ctx, w.Labels["app"]+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get endpoint slice: %v", err)
	}
	slice.Endpoints = envoySlice(w, pod).Endpoints
	if _, err := sliceClient.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update endpoint slice: %v", err)
	}

	start := time.Now()
	token := env.ServiceAccountToken(t, w.Namespace, w.ServiceAccount, []string{"istio-ca"}, pod)
	a := startEnvoyAgent(t, bins, w, token, rootFile, discovery)
	a.waitReady(t, envoyWait)
	t.Logf("new pilot-agent (pod uid %s, was %s) ready %v after start", pod.UID, oldPod.UID, time.Since(start).Round(time.Millisecond))
	st := a.waitState(t, envoyWait, configComplete)
	checkStandinSecrets(t, st, w, rootFile)
	checkStandinXDS(t, st)
	checkStandinEndpoints(t, st, w, svc)
	checkStandinSimulation(t, st, w, svc)
	if old, cur := secretLeaf(t, oldState), secretLeaf(t, st); old != nil && cur != nil && old.SerialNumber.Cmp(cur.SerialNumber) == 0 {
		t.Errorf("the new pod's agent serves the old pod's certificate (serial %s)", cur.SerialNumber)
	}
}
