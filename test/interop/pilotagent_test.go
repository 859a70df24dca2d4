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

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/test/xds/echo"
)

const (
	echoPort     = 8080 // the Service's port
	agentTimeout = 30 * time.Second
)

// TestPilotAgentProxylessGRPC runs Istio's own pilot-agent, unmodified, as
// the agent of two proxyless gRPC apps against istiod in Kubernetes mode
// with a file model: each agent gets its certificate over the CSR API with a
// service-account token from TokenRequest, writes the gRPC bootstrap, and
// proxies the app's xDS to istiod; the client app then calls the server app
// over mTLS, and the server sees the client's SPIFFE ID.
//
// Not parallel: every istiod in Kubernetes mode leads in its own namespace
// and writes its root into istio-ca-root-cert in every namespace, so two at
// once (this one and TestCitadelClientInKubernetesMode's) would overwrite
// the root each other's workloads trust. Sequential tests finish before
// parallel ones resume.
func TestPilotAgentProxylessGRPC(t *testing.T) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns := env.Namespace(t), env.Namespace(t)

	server := workload{Name: "echo-1", Namespace: ns, ServiceAccount: "echo", IP: "127.0.0.2",
		Labels: map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}}
	client := workload{Name: "client-1", Namespace: ns, ServiceAccount: "client", IP: "127.0.0.3",
		Labels: map[string]string{"app": "client", "security.istio.io/tlsMode": "istio"}}
	serverPort := loopbackPort(t, server.IP)

	configDir := t.TempDir()
	writeModel(t, configDir, ns, server, serverPort, client)
	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--configDir", configDir,
		// pilot-agent verifies this name for any localhost address.
		"--serving-dns-names", caSAN)
	rootFile := publishedRoot(t, env, ns)
	_, port, err := net.SplitHostPort(p.SecureGRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	discovery := "localhost:" + port

	agents := map[string]*pilotAgent{}
	for _, w := range []workload{server, client} {
		token := env.ServiceAccountToken(t, w.Namespace, w.ServiceAccount, []string{"istio-ca"}, nil)
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
		"-serve", net.JoinHostPort(server.IP, fmt.Sprint(serverPort)), "-name", server.Name)
	srv.waitLine(t, "mode SERVING", agentTimeout)
	cli := startApp(t, bins.app, agents[client.Name],
		"-target", fmt.Sprintf("xds:///echo.%s.svc.cluster.local:%d", ns, echoPort))

	want := "ok " + server.Name + " " + client.SPIFFEID()
	if got := cli.callUntil(t, want, agentTimeout); got != want {
		t.Fatalf("call through the xDS name: last result %q, want %q", got, want)
	}

	t.Run("under STRICT mTLS the server refuses a plaintext caller", func(t *testing.T) {
		addr := net.JoinHostPort(server.IP, fmt.Sprint(serverPort))
		if err := plaintextCall(addr); status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext call to %s: %v, want code Unavailable", addr, err)
		}
	})

	t.Run("syncz lists both proxies with every type sent acknowledged", func(t *testing.T) {
		waitSynced(t, p.MonitoringAddr, server, client)
	})
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

// writeModel writes the file model istiod serves: the echo Service, the
// server's WorkloadEntry, STRICT mTLS for the namespace and an ALLOW policy
// that admits the client's service account only.
func writeModel(t *testing.T, dir, ns string, server workload, serverPort int, client workload) {
	t.Helper()
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
`, ns, echoPort, server.Name, server.IP, server.ServiceAccount, serverPort,
		trustDomain+"/ns/"+client.Namespace+"/sa/"+client.ServiceAccount)
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(model), 0o600); err != nil {
		t.Fatal(err)
	}
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
	NodeID   string `json:"nodeId"`
	Identity string `json:"identity"`
	Types    map[string]struct {
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
