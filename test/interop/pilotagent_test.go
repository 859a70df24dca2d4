package interop

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/test/xds/echo"
)

const (
	echoPort     = 8080 // the Service's port
	agentTimeout = 30 * time.Second
)

// TestPilotAgentProxylessGRPC runs Istio's own pilot-agent, unmodified, as
// the agent of two proxyless gRPC apps against istiod in Kubernetes mode,
// once for each place the mesh model can come from: YAML files
// (--configDir), and the Kubernetes API (Services, EndpointSlices, Pods and
// Istio resources, watched). Each agent gets its certificate over the CSR
// API with a service-account token from TokenRequest, writes the gRPC
// bootstrap, and proxies the app's xDS to istiod; the client app then calls
// the server app over mTLS, and the server sees the client's SPIFFE ID.
//
// Not parallel: every istiod in Kubernetes mode leads in its own namespace
// and writes its root into istio-ca-root-cert in every namespace, so two at
// once (this one and TestCitadelClientInKubernetesMode's) would overwrite
// the root each other's workloads trust. Sequential tests finish before
// parallel ones resume, and the cases here run one after the other.
func TestPilotAgentProxylessGRPC(t *testing.T) {
	sources := map[string]modelSource{
		"files":      {install: writeModel},
		"kubernetes": {serverIP: hostAddress, install: createModel, change: changePolicies},
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) { testProxylessGRPC(t, src) })
	}
}

// meshModel is the model both sources describe: the echo Service in Namespace
// with Server as its one endpoint on ServerPort, STRICT mTLS for the
// namespace and an ALLOW policy on the server that admits Client's service
// account only.
type meshModel struct {
	Namespace  string
	Server     workload
	Client     workload
	ServerPort int
}

// echoModel is the model in ns before the server's port is chosen: the
// server echo-1 on 127.0.0.2 and the client client-1 on 127.0.0.3, both
// with Istio's mTLS label.
func echoModel(ns string) meshModel {
	return meshModel{
		Namespace: ns,
		Server: workload{Name: "echo-1", Namespace: ns, ServiceAccount: "echo", IP: "127.0.0.2",
			Labels: map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}},
		Client: workload{Name: "client-1", Namespace: ns, ServiceAccount: "client", IP: "127.0.0.3",
			Labels: map[string]string{"app": "client", "security.istio.io/tlsMode": "istio"}},
	}
}

// modelSource is where one case of TestPilotAgentProxylessGRPC keeps the
// mesh model.
type modelSource struct {
	// serverIP, when set, chooses the server's address; by default it is
	// 127.0.0.2, a loopback address of its own.
	serverIP func(t *testing.T) string
	// install puts m where istiod will read it, and returns the flags
	// that point istiod at it and the pods, by workload name, the agents'
	// tokens are bound to (none when the model has no pods).
	install func(t *testing.T, env *testenv.Env, m meshModel) (flags []string, pods map[string]*corev1.Pod)
	// change, when set, changes the model while the apps run, once the
	// client's first call succeeded, and checks that the apps see it.
	change func(t *testing.T, env *testenv.Env, m meshModel, cli *app)
}

func testProxylessGRPC(t *testing.T, src modelSource) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns := env.Namespace(t), env.Namespace(t)

	m := echoModel(ns)
	if src.serverIP != nil {
		m.Server.IP = src.serverIP(t)
	}
	m.ServerPort = freePortOn(t, m.Server.IP)
	server, client := m.Server, m.Client

	modelFlags, pods := src.install(t, env, m)
	p := startIstiod(t, append([]string{"--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		// pilot-agent verifies this name for any localhost address.
		"--serving-dns-names", caSAN}, modelFlags...)...)
	rootFile := publishedRoot(t, env, ns)
	_, port, err := net.SplitHostPort(p.SecureGRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	discovery := "localhost:" + port

	agents := map[string]*pilotAgent{}
	for _, w := range []workload{server, client} {
		// A pod's projected token is bound to the pod; without pods, to nothing.
		token := env.ServiceAccountToken(t, w.Namespace, w.ServiceAccount, []string{"istio-ca"}, pods[w.Name])
		agents[w.Name] = startPilotAgent(t, bins.pilotAgent, w, token, rootFile, discovery)
	}
	for _, a := range agents {
		a.waitReady(t, agentTimeout)
	}

	t.Run("the certificates pilot-agent wrote chain to istiod's root and name the token's service account", func(t *testing.T) {
		for _, a := range agents {
			checkAgentCerts(t, a, rootFile)
		}
	})

	srv := startApp(t, bins.app, agents[server.Name],
		"-serve", net.JoinHostPort(server.IP, fmt.Sprint(m.ServerPort)), "-name", server.Name)
	srv.waitLine(t, "mode SERVING", agentTimeout)
	cli := startApp(t, bins.app, agents[client.Name],
		"-target", fmt.Sprintf("xds:///echo.%s.svc.cluster.local:%d", ns, echoPort))

	want := okFrom(server, client)
	if got := cli.callUntil(t, want, agentTimeout); got != want {
		t.Fatalf("call through the xDS name: last result %q, want %q", got, want)
	}

	t.Run("under STRICT mTLS the server refuses a plaintext caller", func(t *testing.T) {
		addr := net.JoinHostPort(server.IP, fmt.Sprint(m.ServerPort))
		if err := plaintextCall(addr); status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext call to %s: %v, want code Unavailable", addr, err)
		}
	})

	t.Run("syncz lists both proxies with every type sent acknowledged", func(t *testing.T) {
		waitSynced(t, p.MonitoringAddr, server, client)
	})

	if src.change != nil {
		src.change(t, env, m, cli)
	}
}

// okFrom is the app's line for a call that server answered and in which it
// saw client's identity.
func okFrom(server, client workload) string {
	return "ok " + server.Name + " " + client.SPIFFEID()
}

// plaintextCall calls the echo service at addr without TLS.
func plaintextCall(addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = echo.Call(ctx, conn)
	return err
}

// writeModel writes m as the file model of --configDir: the echo Service,
// the server's WorkloadEntry, and the two policies.
func writeModel(t *testing.T, _ *testenv.Env, m meshModel) ([]string, map[string]*corev1.Pod) {
	t.Helper()
	dir := t.TempDir()
	model := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: echo, namespace: %[1]s}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: %[2]d}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %[3]s, namespace: %[1]s}
spec:
  address: %[4]s
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: %[5]s
  ports: {grpc: %[6]d}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: %[1]s}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: echo-callers, namespace: %[1]s}
spec:
  selector: {matchLabels: {app: echo}}
  action: ALLOW
  rules: [{from: [{source: {principals: [%[7]s]}}]}]
`, m.Namespace, echoPort, m.Server.Name, m.Server.IP, m.Server.ServiceAccount, m.ServerPort,
		principal(m.Client))
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(model), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--configDir", dir}, nil
}

// principal is w's identity as an AuthorizationPolicy source names it.
func principal(w workload) string {
	return trustDomain + "/ns/" + w.Namespace + "/sa/" + w.ServiceAccount
}

// checkAgentCerts verifies what pilot-agent wrote to OUTPUT_CERTS: the
// chain verifies to istiod's published root, the leaf names exactly the
// workload's SPIFFE ID and matches key.pem, and root-cert.pem is that root.
func checkAgentCerts(t *testing.T, a *pilotAgent, rootFile string) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(a.CertDir, name))
		if err != nil {
			t.Fatalf("%s: %v", a.Workload.Name, err)
		}
		return b
	}
	published, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, c := range parseCerts(t, published) {
		roots.AddCert(c)
	}
	for _, c := range parseCerts(t, read("root-cert.pem")) {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
			t.Errorf("%s: root-cert.pem holds %s, not istiod's root: %v", a.Workload.Name, c.Subject, err)
		}
	}
	chain := parseCerts(t, read("cert-chain.pem"))
	if len(chain) == 0 {
		t.Fatalf("%s: cert-chain.pem holds no certificate", a.Workload.Name)
	}
	leaf, intermediates := chain[0], x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("%s: leaf does not chain to istiod's root: %v", a.Workload.Name, err)
	}
	if want := a.Workload.SPIFFEID(); len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
		t.Errorf("%s: leaf URI SANs = %v, want exactly [%s]", a.Workload.Name, leaf.URIs, want)
	}
	key := parsePrivateKey(t, read("key.pem"))
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(key.Public()) {
		t.Errorf("%s: key.pem is not the leaf's key", a.Workload.Name)
	}
}

// syncStatus is the part of istiod's /debug/syncz this test reads.
type syncStatus struct {
	NodeID       string `json:"nodeId"`
	Identity     string `json:"identity"`
	LacksNewRoot bool   `json:"lacksNewRoot"`
	Types        map[string]struct {
		Sent     string `json:"sent"`
		Acked    string `json:"acked"`
		LastNACK string `json:"lastNack"`
	} `json:"types"`
}

// waitSynced waits until /debug/syncz shows a stream for each workload,
// authenticated as its service account, on which a listener was sent and
// every version sent was ACKed without a NACK.
func waitSynced(t *testing.T, monitoringAddr string, workloads ...workload) {
	t.Helper()
	var problems []string
	for deadline := time.Now().Add(agentTimeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		statuses, err := getSyncz(monitoringAddr)
		if err != nil {
			problems = []string{err.Error()}
			continue
		}
		problems = problems[:0]
		for _, w := range workloads {
			if p := syncProblem(statuses, w); p != "" {
				problems = append(problems, p)
			}
		}
		if len(problems) == 0 {
			return
		}
	}
	t.Fatalf("syncz: %s", strings.Join(problems, "; "))
}

func getSyncz(addr string) ([]syncStatus, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/debug/syncz")
	if err != nil {
		return nil, fmt.Errorf("get syncz: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read syncz: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get syncz: %s: %s", resp.Status, body)
	}
	var out []syncStatus
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode syncz: %w", err)
	}
	return out, nil
}

// syncProblem says what is missing for w in statuses, or "" when w's
// stream has a listener acknowledged and nothing pending or refused.
// proxyConfigType is Istio's PCDS type.
const proxyConfigType = "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig"

func syncProblem(statuses []syncStatus, w workload) string {
	// pilot-agent's node ID: sidecar~<ip>~<pod>.<ns>~<ns>.svc.cluster.local.
	nodeID := "sidecar~" + w.IP + "~" + w.Name + "." + w.Namespace + "~" + w.Namespace + ".svc.cluster.local"
	const listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	for _, st := range statuses {
		if st.NodeID != nodeID {
			continue
		}
		if st.Identity != w.SPIFFEID() {
			return fmt.Sprintf("%s authenticated as %q, want %q", nodeID, st.Identity, w.SPIFFEID())
		}
		if st.Types[listenerType].Acked == "" {
			return fmt.Sprintf("%s: no listener version acknowledged: %+v", nodeID, st.Types)
		}
		// The agent ACKs the trust bundle (PCDS) itself.
		if st.Types[proxyConfigType].Acked == "" {
			return fmt.Sprintf("%s: no ProxyConfig (trust bundle) acknowledged: %+v", nodeID, st.Types)
		}
		for typeURL, ts := range st.Types {
			if ts.LastNACK != "" || ts.Acked != ts.Sent {
				return fmt.Sprintf("%s: %s sent %q, acked %q, NACK %q", nodeID, typeURL, ts.Sent, ts.Acked, ts.LastNACK)
			}
		}
		return ""
	}
	return fmt.Sprintf("no stream for %s", nodeID)
}

// parsePrivateKey parses key.pem as pilot-agent writes it: PKCS#8, SEC 1 or
// PKCS#1.
func parsePrivateKey(t *testing.T, data []byte) crypto.Signer {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("key.pem holds no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		t.Fatalf("parse key.pem (%s): %v", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		t.Fatalf("key.pem holds a %T, not a signing key", key)
	}
	return signer
}
