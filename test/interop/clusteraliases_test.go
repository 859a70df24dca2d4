package interop

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// TestClusterAliasesOnTwoAPIServers: istiod of cluster A, run with
// Istio's --clusterAliases naming an old ID of A and one of B, registers
// B from istioctl's remote secret. Istio's CA client with B's pod token
// under B's old ID gets its certificate, reviewed by B's API server and
// recorded as B in the issuance log and metric; under A's old ID it is
// refused (A's API server cannot verify B's token). On xDS, B's token
// with node metadata CLUSTER_ID naming B's old ID is served, and naming
// A's old ID is refused.
func TestClusterAliasesOnTwoAPIServers(t *testing.T) {
	envA := testenv.Get(t)
	envB := testenv.StartPrivate(t)
	istiodNS, nsA := envA.Namespace(t), envA.Namespace(t)
	p := startIstiod(t, "--kubeconfig", envA.Kubeconfig, "--namespace", istiodNS, "--clusterID", clusterA,
		"--clusterAliases", "old-a="+clusterA+",old-b="+clusterB,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	ca := caTarget{addr: p.SecureGRPCAddr, root: publishedRoot(t, envA, nsA), san: "istiod." + istiodNS + ".svc"}
	registerRemote(t, p, envA, istiodNS, istioctlRemoteSecret(t, envB, clusterB))

	nsB := envB.Namespace(t)
	podB := createPod(t, envB, nsB, "demo-1", "demo")
	tokenB := envB.ServiceAccountToken(t, nsB, "demo", []string{"istio-ca"}, podB)
	idB := "spiffe://cluster.local/ns/" + nsB + "/sa/demo"

	t.Run("B's token under B's old ID is reviewed by B and recorded as B", func(t *testing.T) {
		chain, csrPEM, err := csrWith(t, ca, tokenB, "old-b", idB)
		if err != nil {
			t.Fatalf("CSRSign: %v", err)
		}
		checkIssuedChain(t, chain, idB, csrPEM, ca.root)
		waitLogged(t, p, "cluster="+clusterB)
		if strings.Contains(p.logs.String(), "cluster=old-b") {
			t.Error("istiod logged the alias, not the cluster")
		}
		if v := metricValue(t, p.MonitoringAddr, `bulwark_csr_issued_by_cluster_total{cluster="`+clusterB+`"}`); v != 1 {
			t.Errorf("certificates issued for %s: %v, want 1", clusterB, v)
		}
		if v := metricValue(t, p.MonitoringAddr, `bulwark_csr_issued_by_cluster_total{cluster="old-b"}`); v != 0 {
			t.Errorf("certificates issued for old-b: %v, want none", v)
		}
	})
	t.Run("B's token under A's old ID is refused", func(t *testing.T) {
		wantCode(t, "Unauthenticated", csrErr(t, ca, tokenB, "old-a", idB))
	})
	t.Run("xDS: B's token with CLUSTER_ID of B's old ID is served B's pod", func(t *testing.T) {
		if err := adsFirstResponse(t, ca, tokenB, "old-b", nsB, podB.Name, "old-b"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("xDS: B's token with CLUSTER_ID of A's old ID is refused", func(t *testing.T) {
		if err := adsFirstResponse(t, ca, tokenB, clusterB, nsB, podB.Name, "old-a"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("CLUSTER_ID old-a: %v, want PermissionDenied", err)
		}
	})
}
