package interop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

// TestRemoteClustersProxyIsServedItsOwnPod runs istiod in cluster A with
// cluster B registered by istioctl's remote secret. A sidecar of B,
// authenticated by B's token (header ClusterID B, CLUSTER_ID B), gets its
// configuration from A's istiod: the Istio configuration of A (the config
// cluster) applied to its own pod in B, whose namesake in A has other
// labels. The spoof, B's token naming cluster A, is refused; so is a
// token of a pod deleted in B. Its credentialName Secrets are B's, which
// B's reader here may not list (docs/rbac.md's reader without
// global.readerSecrets): refused at once, and the Secret of that name in
// A, which A's namesake may get, is not served to it
// (TestRemoteClustersProxyGetsItsClustersCredentialSecrets grants them).
func TestRemoteClustersProxyIsServedItsOwnPod(t *testing.T) {
	sidecar, ok := policy.Lookup("networking.istio.io", "Sidecar")
	if !ok {
		t.Fatal("no Sidecar kind")
	}
	c := startTwoClusters(t, []string{unsupportedtest.WriteFile(t, unsupportedtest.CRD(sidecar, "v1"))}, nil)
	envA, envB, ns, p, ca := c.a, c.b, c.ns, c.istiod, c.ca
	ctx := context.Background()

	// Services echo and web in A; a Sidecar of A scoping to web the
	// workloads of B labelled app: client.
	echoIn(t, envA, ns, 80, 8080)
	webIn(t, envA, ns)
	if _, err := istioClient(t, envA).NetworkingV1().Sidecars(ns).Create(ctx, &istionetworkingv1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "b-clients", Namespace: ns},
		Spec: networkingapi.Sidecar{
			WorkloadSelector: &networkingapi.WorkloadSelector{Labels: map[string]string{"app": "client", "topology.istio.io/cluster": clusterB}},
			Egress:           []*networkingapi.IstioEgressListener{{Hosts: []string{"./web." + ns + ".svc.cluster.local"}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pods of one name, ns/client, in both clusters: in B labelled
	// app: client, in A app: local.
	podB := createRunningPod(ctx, t, envB, workload{Name: "client-1", Namespace: ns, ServiceAccount: "client", IP: "10.20.0.9",
		Labels: map[string]string{"app": "client"}})
	podA := createRunningPod(ctx, t, envA, workload{Name: "client-1", Namespace: ns, ServiceAccount: "client", IP: "10.10.0.9",
		Labels: map[string]string{"app": "local"}})
	tokenB := envB.ServiceAccountToken(t, ns, "client", []string{"istio-ca"}, podB)
	tokenA := envA.ServiceAccountToken(t, ns, "client", []string{"istio-ca"}, podA)
	echo, web := "outbound|80||echo."+ns+".svc.cluster.local", "outbound|80||web."+ns+".svc.cluster.local"
	// outbound waits for the sidecar's outbound clusters to hold web, and
	// echo when withEcho (istiod may read the pods and the Sidecar after
	// the sidecar connects: a push follows).
	outbound := func(s *sidecarStream, withEcho bool) {
		var names []string
		s.await(t, typeCluster, nil, fmt.Sprintf("web and, %v, echo", withEcho), func(res *discoveryv3.DiscoveryResponse) bool {
			names = names[:0]
			for _, c := range decodeClusters(t, res) {
				if strings.HasPrefix(c.GetName(), "outbound|") {
					names = append(names, c.GetName())
				}
			}
			return slices.Contains(names, web) && slices.Contains(names, echo) == withEcho
		}, func() string { return fmt.Sprint(names) })
	}

	t.Run("B's sidecar gets A's configuration for its own pod in B", func(t *testing.T) {
		outbound(dialSidecar(t, ca, tokenB, clusterB, podB), false) // scoped by the Sidecar
	})
	t.Run("A's sidecar of the same name is A's pod, which the Sidecar does not select", func(t *testing.T) {
		outbound(dialSidecar(t, ca, tokenA, clusterA, podA), true)
	})
	t.Run("the spoof: B's token naming cluster A, where a pod of that name runs, is refused", func(t *testing.T) {
		s := dialSidecar(t, ca, tokenB, clusterB, podB)
		s.node.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(clusterA)
		if err := s.st.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeCluster}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.st.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want PermissionDenied", err)
		}
		waitLogged(t, p, "node cluster does not match the authenticating cluster")
	})
	t.Run("B's pod deleted: its sidecar's token is refused", func(t *testing.T) {
		pod := createRunningPod(ctx, t, envB, workload{Name: "client-2", Namespace: ns, ServiceAccount: "client", IP: "10.20.0.10",
			Labels: map[string]string{"app": "client"}})
		token := envB.ServiceAccountToken(t, ns, "client", []string{"istio-ca"}, pod)
		if err := envB.Client(t).CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		s := dialSidecar(t, ca, token, clusterB, pod)
		if err := s.st.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeCluster}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.st.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%v, want Unauthenticated", err)
		}
	})
	t.Run("a Secret of A that A's namesake may get is not served to B's sidecar", func(t *testing.T) {
		const name = "kubernetes://creds"
		secretReadableBy(t, envA, ns, "creds", "client")
		secrets := func(token, cluster string, pod *corev1.Pod, want int) {
			t.Helper()
			s := dialSidecar(t, ca, token, cluster, pod)
			outbound(s, cluster == clusterA)
			var got int
			s.await(t, typeSecret, []string{name}, "the answer for "+name, func(res *discoveryv3.DiscoveryResponse) bool {
				got = len(res.GetResources())
				return got == want || want == 0 // none served: the first answer is the answer
			})
			if got != want {
				t.Fatalf("the sidecar of %s got %d secrets, want %d", cluster, got, want)
			}
		}
		secrets(tokenA, clusterA, podA, 1)
		before := metricValue(t, p.MonitoringAddr, `bulwark_sds_refused_total{reason="remote_cluster"}`)
		start := time.Now()
		secrets(tokenB, clusterB, podB, 0)
		t.Logf("B's sidecar dialed, given its clusters and refused its Secret in %v (its reader may not list Secrets; the listing wait is 5 s)", time.Since(start).Round(time.Millisecond))
		if after := metricValue(t, p.MonitoringAddr, `bulwark_sds_refused_total{reason="remote_cluster"}`); after <= before {
			t.Errorf("remote_cluster refusals %v → %v", before, after)
		}
		waitLogged(t, p, "the remote cluster's reader may not read its secrets")
		waitLogged(t, p, "secrets may not be listed")
	})
}

// webIn creates Service web in ns of env, port http 80.
func webIn(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	if _, err := env.Client(t).CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// secretReadableBy creates a kubernetes.io/tls Secret name in ns of env
// that service account sa may get.
func secretReadableBy(t *testing.T, env *testenv.Env, ns, name, sa string) {
	t.Helper()
	ctx := context.Background()
	client := env.Client(t)
	root := catest.NewRoot(t)
	leaf := catest.NewIntermediate(t, root, catest.WithoutCA())
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": root.CertPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-" + name, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{name}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-" + name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-" + name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
