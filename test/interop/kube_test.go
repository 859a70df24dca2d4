package interop

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	"istio.io/istio/security/pkg/pki/util"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// TestCitadelClientInKubernetesMode runs istiod against a real
// kube-apiserver and has Istio's CA client ask for a certificate with a
// service-account token from TokenRequest, trusting the root istiod
// published as istio-ca-root-cert, as an agent in a pod does.
func TestCitadelClientInKubernetesMode(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	istiodNS, workloadNS := env.Namespace(t), env.Namespace(t)
	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	rootFile := publishedRoot(t, env, workloadNS)
	id := "spiffe://cluster.local/ns/" + workloadNS + "/sa/demo"

	tokens := map[string]struct {
		audience string
		ok       bool
	}{
		"a token for istio-ca gets the service account's identity": {audience: "istio-ca", ok: true},
		"a token for another audience is refused":                  {audience: "other", ok: false},
	}
	for name, tc := range tokens {
		t.Run(name, func(t *testing.T) {
			token := env.ServiceAccountToken(t, workloadNS, "demo", []string{tc.audience}, nil)
			client, err := citadel.NewCitadelClient(&security.Options{
				CAEndpoint:    p.SecureGRPCAddr,
				CAEndpointSAN: "istiod." + istiodNS + ".svc",
				ClusterID:     clusterID,
				CredFetcher:   staticToken(token),
			}, &citadel.TLSOptions{RootCert: rootFile})
			if err != nil {
				t.Fatalf("NewCitadelClient: %v", err)
			}
			defer client.Close()
			csrPEM, _, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
			if err != nil {
				t.Fatal(err)
			}
			chain, err := client.CSRSign(csrPEM, int64(time.Hour/time.Second))
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
					t.Fatalf("CSRSign error = %v, want Unauthenticated", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CSRSign: %v", err)
			}
			checkIssuedChain(t, chain, id, csrPEM, rootFile)
		})
	}
}

// publishedRoot waits for istio-ca-root-cert in ns and writes its
// root-cert.pem to a file, as the ConfigMap volume of a pod would.
func publishedRoot(t *testing.T, env *testenv.Env, ns string) string {
	t.Helper()
	client := env.Client(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
		if err == nil && cm.Data["root-cert.pem"] != "" {
			path := filepath.Join(t.TempDir(), "root-cert.pem")
			if err := os.WriteFile(path, []byte(cm.Data["root-cert.pem"]), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}
		if time.Now().After(deadline) {
			t.Fatalf("istio-ca-root-cert not published in %s: %v", ns, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
