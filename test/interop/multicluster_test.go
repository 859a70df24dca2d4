package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	"istio.io/istio/security/pkg/pki/util"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

const (
	clusterA = "cluster-a"
	clusterB = "cluster-b"
)

// TestMultiClusterTokensAreReviewedByTheirCluster runs istiod in cluster
// A, registers cluster B (a second API server with its own service-account
// issuer and keys) from the remote secret Istio's `istioctl
// create-remote-secret` writes, and has Istio's CA client ask A's istiod
// for certificates with pod tokens of B and of A, under the ClusterID
// headers agents send.
func TestMultiClusterTokensAreReviewedByTheirCluster(t *testing.T) {
	envA := testenv.Get(t)
	envB := testenv.StartPrivate(t)
	istiodNS, nsA := envA.Namespace(t), envA.Namespace(t)
	p := startIstiod(t, "--kubeconfig", envA.Kubeconfig, "--namespace", istiodNS, "--clusterID", clusterA,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	root := publishedRoot(t, envA, nsA)
	ca := caTarget{addr: p.SecureGRPCAddr, root: root, san: "istiod." + istiodNS + ".svc"}

	remote := istioctlRemoteSecret(t, envB, clusterB)
	registerRemote(t, p, envA, istiodNS, remote)

	nsB := envB.Namespace(t)
	podB := createPod(t, envB, nsB, "demo-1", "demo")
	tokenB := envB.ServiceAccountToken(t, nsB, "demo", []string{"istio-ca"}, podB)
	idB := "spiffe://cluster.local/ns/" + nsB + "/sa/demo"
	podA := createPod(t, envA, nsA, "local-1", "local")
	tokenA := envA.ServiceAccountToken(t, nsA, "local", []string{"istio-ca"}, podA)
	idA := "spiffe://cluster.local/ns/" + nsA + "/sa/local"

	t.Run("a pod token of B with header B gets its certificate from A's istiod", func(t *testing.T) {
		chain, csrPEM, err := csrWith(t, ca, tokenB, clusterB, idB)
		if err != nil {
			t.Fatalf("CSRSign: %v", err)
		}
		checkIssuedChain(t, chain, idB, csrPEM, ca.root)
		waitLogged(t, p, "cluster="+clusterB)
	})
	for name, header := range map[string]string{
		"the token of B with header A is refused":          clusterA,
		"the token of B with no cluster header is refused": "",
		"the token of B with an unknown header is refused": "nowhere",
	} {
		t.Run(name, func(t *testing.T) {
			wantCode(t, "Unauthenticated", csrErr(t, ca, tokenB, header, idB))
		})
	}
	t.Run("a local token with an unknown cluster header is refused, not logged under that cluster", func(t *testing.T) {
		wantCode(t, "Unauthenticated", csrErr(t, ca, tokenA, "nowhere", idA))
		if strings.Contains(p.logs.String(), "cluster=nowhere") {
			t.Error("istiod logged the claimed cluster")
		}
	})
	t.Run("a local token with header A is accepted", func(t *testing.T) {
		if err := csrErr(t, ca, tokenA, clusterA, idA); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("xDS: authenticated by B, a node claiming cluster A is refused, though A has a pod of that name", func(t *testing.T) {
		if _, err := envA.Client(t).CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsB}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createPod(t, envA, nsB, podB.Name, "demo")
		// CLUSTER_ID B is served B's pod (TestRemoteClustersProxyIsServedItsOwnPod).
		if err := adsFirstResponse(t, ca, tokenB, clusterB, nsB, podB.Name, clusterA); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("CLUSTER_ID %s: %v, want PermissionDenied", clusterA, err)
		}
		waitLogged(t, p, "node cluster does not match the authenticating cluster")
	})
	t.Run("B's pod deleted: its token is refused", func(t *testing.T) {
		pod := createPod(t, envB, nsB, "demo-2", "demo")
		token := envB.ServiceAccountToken(t, nsB, "demo", []string{"istio-ca"}, pod)
		if err := envB.Client(t).CoreV1().Pods(nsB).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "Unauthenticated", csrErr(t, ca, token, clusterB, idB))
	})
	t.Run("B's API server stopped: B's tokens are unavailable, A's work goes on, and B recovers without restart", func(t *testing.T) {
		// A token not reviewed yet, so that no cached review answers.
		pod := createPod(t, envB, nsB, "demo-3", "demo")
		token := envB.ServiceAccountToken(t, nsB, "demo", []string{"istio-ca"}, pod)
		envB.Stop(t)
		wantCode(t, "Unavailable", csrErr(t, ca, token, clusterB, idB))
		if err := csrErr(t, ca, tokenA, clusterA, idA); err != nil {
			t.Fatalf("A's token while B is down: %v", err)
		}
		envB.Restart(t)
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := csrErr(t, ca, token, clusterB, idB)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B's token after B's restart: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	t.Run("the remote secret deleted: B's tokens are refused as of an unknown cluster", func(t *testing.T) {
		if err := envA.Client(t).CoreV1().Secrets(istiodNS).Delete(context.Background(), remote.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitClusterz(t, p, clusterB, "")
		pod := createPod(t, envB, nsB, "demo-4", "demo")
		token := envB.ServiceAccountToken(t, nsB, "demo", []string{"istio-ca"}, pod)
		wantCode(t, "Unauthenticated", csrErr(t, ca, token, clusterB, idB))
	})
}

// istioctlRemoteSecret has Istio's istioctl write the remote secret of
// env's cluster, named id, for the reader service account of istio-system.
// The service account's token Secret is written by the test, as
// kube-controller-manager's token controller (not run here) would fill it;
// the reader has the chart's remote-reader ClusterRole (grantRemoteReader).
func istioctlRemoteSecret(t testing.TB, env *testenv.Env, id string) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	client := env.Client(t)
	const ns, sa = "istio-system", "istio-reader-service-account"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := env.ServiceAccountToken(t, ns, sa, nil, nil)
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-istio-remote-secret-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
		Type:       corev1.SecretTypeServiceAccountToken,
		Data:       map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token), corev1.ServiceAccountRootCAKey: env.CAPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantRemoteReader(t, env, ns, sa)
	istioctl := istioctlBinary(t)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, istioctl, "create-remote-secret", "--kubeconfig", env.Kubeconfig,
		"--name", id, "--istioNamespace", ns, "--create-service-account=false")
	cmd.Env = isolatedEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("istioctl create-remote-secret: %v\n%s", err, stderr.String())
	}
	var s corev1.Secret
	if err := yaml.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("istioctl's remote secret: %v\n%s", err, stdout.String())
	}
	if s.Labels["istio/multiCluster"] != "true" || s.StringData[id] == "" {
		t.Fatalf("istioctl's remote secret is not of the expected shape:\n%s", stdout.String())
	}
	return &s
}

// chartCRDs is the Istio CRDs the chart carries, as files to install.
func chartCRDs(t testing.TB) []string {
	t.Helper()
	crds, err := filepath.Glob(filepath.Join(repoRoot, "charts", "istiod", "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("Istio CRDs under charts/istiod/crds: %v (%d files)", err, len(crds))
	}
	return crds
}

// twoClusters is istiod in cluster A with cluster B (an API server of its
// own) registered from the remote secret istioctl writes, and a namespace
// ns of the same name in both.
type twoClusters struct {
	a, b         *testenv.Env
	istiodNS, ns string
	istiod       *istiod
	ca           caTarget
	remote       *corev1.Secret // the remote secret of B, in A's istiodNS
}

// startTwoClusters installs the chart's CRDs and extraCRDs in A, starts
// istiod there, runs prepareB on B (say, to grant its reader more than
// the chart's remote-reader rules) and registers B, waiting until istiod
// has synced it.
func startTwoClusters(t *testing.T, extraCRDs []string, prepareB func(b *testenv.Env)) *twoClusters {
	t.Helper()
	c := &twoClusters{a: testenv.Get(t), b: testenv.StartPrivate(t)}
	c.a.InstallCRDs(t, append(chartCRDs(t), extraCRDs...)...)
	c.istiodNS, c.ns = c.a.Namespace(t), c.a.Namespace(t)
	createNamespace(t, c.b.Client(t), c.ns, nil)
	c.istiod = startIstiod(t, "--kubeconfig", c.a.Kubeconfig, "--namespace", c.istiodNS, "--clusterID", clusterA,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	c.ca = caTarget{addr: c.istiod.SecureGRPCAddr, root: publishedRoot(t, c.a, c.ns), san: "istiod." + c.istiodNS + ".svc"}
	c.remote = istioctlRemoteSecret(t, c.b, clusterB)
	if prepareB != nil {
		prepareB(c.b)
	}
	registerRemote(t, c.istiod, c.a, c.istiodNS, c.remote)
	return c
}

// registerRemote applies the remote secret in istiod's namespace of
// cluster env and waits until istiod has synced the cluster it names.
func registerRemote(t *testing.T, p *istiod, env *testenv.Env, istiodNS string, remote *corev1.Secret) {
	t.Helper()
	remote.Namespace = istiodNS
	if _, err := env.Client(t).CoreV1().Secrets(istiodNS).Create(context.Background(), remote, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply istioctl's remote secret: %v", err)
	}
	for id := range remote.StringData {
		waitClusterz(t, p, id, "synced")
	}
}

// istioctlBuild is istioctl for the benchmarks, run under -short.
var istioctlBuild lazyBinary

// istioctlBinary is the istioctl TestMain built, or under -short one
// built on first use.
func istioctlBinary(t testing.TB) string {
	t.Helper()
	if !testing.Short() {
		if peerBuild.err != nil {
			t.Fatalf("build the peers: %v", peerBuild.err)
		}
		return peerBuild.peers.istioctl
	}
	return istioctlBuild.get(t, "istioctl", "istioctl", "istio.io/istio/istioctl/cmd/istioctl")
}

// createPod writes a pod running as sa, as a scheduler-less API server
// keeps it: pending, which is enough to bind a token to it.
func createPod(t *testing.T, env *testenv.Env, ns, name, sa string) *corev1.Pod {
	t.Helper()
	env.ServiceAccountToken(t, ns, sa, []string{"istio-ca"}, nil) // creates the account
	pod, err := env.Client(t).CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// caTarget is an istiod's CSR API as an agent reaches it.
type caTarget struct{ addr, root, san string }

// csrWith has Istio's CA client ask istiod for a certificate of id with
// token, sending cluster as its ClusterID header.
func csrWith(t *testing.T, ca caTarget, token, cluster, id string) ([]string, []byte, error) {
	t.Helper()
	client, err := citadel.NewCitadelClient(&security.Options{
		CAEndpoint: ca.addr, CAEndpointSAN: ca.san, ClusterID: cluster, CredFetcher: staticToken(token),
	}, &citadel.TLSOptions{RootCert: ca.root})
	if err != nil {
		t.Fatalf("NewCitadelClient: %v", err)
	}
	defer client.Close()
	csrPEM, _, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := client.CSRSign(csrPEM, int64(time.Hour/time.Second))
	return chain, csrPEM, err
}

func csrErr(t *testing.T, ca caTarget, token, cluster, id string) error {
	t.Helper()
	_, _, err := csrWith(t, ca, token, cluster, id)
	return err
}

func wantCode(t *testing.T, code string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "code = "+code) {
		t.Fatalf("error = %v, want code %s", err, code)
	}
	for _, leak := range []string{clusterB, clusterA, "nowhere"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("the refusal names a cluster: %v", err)
		}
	}
}

// waitClusterz waits until istiod's /debug/clusterz lists id with status
// (status "": id not listed).
func waitClusterz(t *testing.T, p *istiod, id, status string) {
	t.Helper()
	if err := clusterzWait(p.MonitoringAddr, id, status, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// clusterzWait waits until the /debug/clusterz served at addr, Bulwark's
// or Istio's, lists id with status (status "": id not listed).
func clusterzWait(addr, id, status string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/debug/clusterz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(body)
			var clusters []struct {
				ID         string `json:"id"`
				SyncStatus string `json:"syncStatus"`
			}
			if json.Unmarshal(body, &clusters) == nil {
				got := ""
				for _, c := range clusters {
					if c.ID == id {
						got = c.SyncStatus
					}
				}
				if got == status {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("clusterz: %s not %q after %s: %s", id, status, timeout, last)
}

// adsFirstResponse opens an ADS stream to istiod as an agent of pod
// ns/pod would, with token and header cluster, node metadata CLUSTER_ID
// claimed, and returns the error of its first response (nil: served).
func adsFirstResponse(t *testing.T, ca caTarget, token, cluster, ns, pod, claimed string) error {
	t.Helper()
	pem, err := os.ReadFile(ca.root)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	conn, err := grpc.NewClient(ca.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: ca.san})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, "ClusterID", cluster)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": "demo", "CLUSTER_ID": claimed, "GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "sidecar~10.0.0.1~" + pod + "." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener"}); err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// remoteReaderBlock is the remote reader's ClusterRole in docs/rbac.md,
// which test/helm keeps equal to the chart's.
var remoteReaderBlock = regexp.MustCompile("(?s)```yaml remote-reader\n(.*?)```")

// grantRemoteReader gives ns/sa of env's cluster the remote reader's
// ClusterRole of docs/rbac.md, and nothing else: what another cluster's
// istiod may do there.
func grantRemoteReader(t testing.TB, env *testenv.Env, ns, sa string) {
	t.Helper()
	const doc = "../../docs/rbac.md"
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	m := remoteReaderBlock.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: no remote-reader block", doc)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(m[1], &role); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	ctx := context.Background()
	rbac := env.Client(t).RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
