package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	networkingapi "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// TestRemoteClustersProxyGetsItsClustersCredentialSecrets runs istiod in
// cluster A with cluster B registered by istioctl's remote secret, B's
// reader granted docs/rbac.md's reader rules and the ones
// global.readerSecrets adds. A sidecar of B, authenticated by B's token,
// asks A's istiod for credentialName Secrets of its namespace:
//   - B's Secret is served, never A's Secret of the same name (which A's
//     namesake pod is served);
//   - a Secret A alone has is not served to it;
//   - a Secret of B its service account may not get in B is refused (the
//     SubjectAccessReview is B's);
//   - B's Secret rotated: the new bytes are pushed on the open stream;
//   - B's remote secret deleted: nothing more is served to it.
func TestRemoteClustersProxyGetsItsClustersCredentialSecrets(t *testing.T) {
	remoteClustersCredentialSecrets(t, "sidecar")
}

// TestRemoteClustersRouterGetsItsClustersCredentialSecrets is
// TestRemoteClustersProxyGetsItsClustersCredentialSecrets for an ingress
// gateway pod of B (pilot-agent in router mode): a Gateway of A, the
// config cluster, selecting it names the three Secrets as the
// credentialName of three HTTPS servers, and the router asks for the
// names its listeners carry (kubernetes://<name>). A router's Secrets are
// checked as a sidecar's (its namespace, a SubjectAccessReview in its
// cluster), so the same holds.
func TestRemoteClustersRouterGetsItsClustersCredentialSecrets(t *testing.T) {
	remoteClustersCredentialSecrets(t, "router")
}

// remoteClustersCredentialSecrets runs the remote credentialName case for
// a proxy of node type typ, "sidecar" or "router".
func remoteClustersCredentialSecrets(t *testing.T, typ string) {
	var crds []string // Istio's Gateway CRD in A, the config cluster, for a router
	if typ == "router" {
		routing, err := istioRoutingCRDs()
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, routing)
	}
	c := startTwoClusters(t, crds, func(b *testenv.Env) {
		grantReaderSecrets(t, b, "istio-system", "istio-reader-service-account")
	})
	envA, envB, istiodNS, ns, p, ca, remote := c.a, c.b, c.istiodNS, c.ns, c.istiod, c.ca, c.remote
	ctx := context.Background()

	labels := map[string]string{"app": "gw"}
	if typ == "router" {
		labels = map[string]string{"app": "gw", "istio": "ingressgateway"}
		gatewayNamingCredentials(t, envA, ns, map[uint32]string{443: "creds", 8443: "only-a", 9443: "not-gws"})
	}
	podB := createRunningPod(ctx, t, envB, workload{Name: "gw-1", Namespace: ns, ServiceAccount: "gw", IP: "10.20.0.19", Labels: labels})
	podA := createRunningPod(ctx, t, envA, workload{Name: "gw-1", Namespace: ns, ServiceAccount: "gw", IP: "10.10.0.19", Labels: labels})
	tokenB := envB.ServiceAccountToken(t, ns, "gw", []string{"istio-ca"}, podB)
	tokenA := envA.ServiceAccountToken(t, ns, "gw", []string{"istio-ca"}, podA)
	// creds in both clusters, each readable by gw there; only-a in A,
	// readable by gw there; not-gws in B, which gw may not get.
	secretReadableBy(t, envA, ns, "creds", "gw")
	secretReadableBy(t, envB, ns, "creds", "gw")
	secretReadableBy(t, envA, ns, "only-a", "gw")
	notGWs := catest.NewIntermediate(t, catest.NewRoot(t), catest.WithoutCA())
	if _, err := envB.Client(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "not-gws", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": notGWs.CertPEM, "tls.key": notGWs.KeyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	certIn := func(env *testenv.Env, name string) []byte {
		s, err := env.Client(t).CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data["tls.crt"]
	}
	credsA, credsB := certIn(envA, "creds"), certIn(envB, "creds")
	if bytes.Equal(credsA, credsB) {
		t.Fatal("the two clusters' creds are the same certificate")
	}
	const creds, onlyA, notGW = "kubernetes://creds", "kubernetes://only-a", "kubernetes://not-gws"
	all := []string{creds, notGW, onlyA}
	// connect opens the proxy's stream and waits for its first clusters
	// (the pod is in the model) or, for a router, for listeners naming
	// the three Secrets, the names it then asks for. Gateways of other
	// tests on the same API server may select the router too (a Gateway
	// of any namespace applies, as in Istio), so their names may be
	// there as well.
	connect := func(token, cluster string, pod *corev1.Pod) *sidecarStream {
		s := dialProxy(t, ca, typ, token, cluster, pod)
		if typ != "router" {
			s.await(t, typeCluster, nil, "clusters", func(*discoveryv3.DiscoveryResponse) bool { return true })
			return s
		}
		var names []string
		s.await(t, typeListener, nil, fmt.Sprintf("listeners naming %v", all), func(res *discoveryv3.DiscoveryResponse) bool {
			names = listenerSecretNames(t, res)
			return !slices.ContainsFunc(all, func(n string) bool { return !slices.Contains(names, n) })
		}, func() string { return fmt.Sprint(names) })
		return s
	}
	var last map[string][]byte
	served := func(want map[string][]byte) func(*discoveryv3.DiscoveryResponse) bool {
		return func(res *discoveryv3.DiscoveryResponse) bool {
			last = certsOf(t, res)
			return equalCerts(last, want)
		}
	}
	describe := func() string { return fmt.Sprint(secretNames(last)) }

	sa := connect(tokenA, clusterA, podA)
	sa.await(t, typeSecret, []string{creds}, "A's creds", served(map[string][]byte{creds: credsA}), describe)

	sb := connect(tokenB, clusterB, podB)
	unauthorized := metricValue(t, p.MonitoringAddr, `bulwark_sds_refused_total{reason="unauthorized"}`)
	start := time.Now()
	sb.await(t, typeSecret, all, "B's creds alone", served(map[string][]byte{creds: credsB}), describe)
	t.Logf("B's creds served %v after the request (B's namespace watched from then)", time.Since(start).Round(time.Millisecond))
	eventuallyTrue(t, 10*time.Second, "not-gws refused as unauthorized", func() bool {
		return metricValue(t, p.MonitoringAddr, `bulwark_sds_refused_total{reason="unauthorized"}`) > unauthorized
	})

	t.Run("B's Secret rotated: the new bytes are pushed", func(t *testing.T) {
		next := catest.NewIntermediate(t, catest.NewRoot(t), catest.WithoutCA())
		sec, err := envB.Client(t).CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data["tls.crt"], sec.Data["tls.key"] = next.CertPEM, next.KeyPEM
		start := time.Now()
		if _, err := envB.Client(t).CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := sb.pushed(typeSecret, all, served(map[string][]byte{creds: next.CertPEM})); err != nil {
			t.Fatalf("the rotated creds: %v; last: %s", err, describe())
		}
		t.Logf("rotated creds pushed %v after the update was sent", time.Since(start).Round(100*time.Microsecond))
	})
	t.Run("B's remote secret deleted: nothing more is served", func(t *testing.T) {
		start := time.Now()
		if err := envA.Client(t).CoreV1().Secrets(istiodNS).Delete(ctx, remote.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Either an answer without the Secret or the stream's end.
		err := sb.pushed(typeSecret, all, served(map[string][]byte{}))
		if err != nil && status.Code(err) == codes.DeadlineExceeded {
			t.Fatalf("B's Secret still served: %s", describe())
		}
		t.Logf("B's creds withdrawn %v after its remote secret's deletion was sent (stream: %v)", time.Since(start).Round(100*time.Microsecond), err)
		s := dialProxy(t, ca, typ, tokenB, clusterB, podB)
		if err := s.st.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeSecret, ResourceNames: []string{creds}}); err != nil {
			t.Fatal(err)
		}
		if res, err := s.st.Recv(); err == nil {
			t.Fatalf("a new stream of B got %v after its cluster was withdrawn", secretNames(certsOf(t, res)))
		}
	})
	// A's proxy still gets A's Secret.
	sa = connect(tokenA, clusterA, podA)
	sa.await(t, typeSecret, []string{creds}, "A's creds", served(map[string][]byte{creds: credsA}), describe)
}

// gatewayNamingCredentials creates in env a Gateway of ns selecting
// istio: ingressgateway with an HTTPS server (SIMPLE) per port, each
// naming its Secret as credentialName.
func gatewayNamingCredentials(t *testing.T, env *testenv.Env, ns string, secrets map[uint32]string) {
	t.Helper()
	gw := &istionetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "public", Namespace: ns},
		Spec:       networkingapi.Gateway{Selector: map[string]string{"istio": "ingressgateway"}},
	}
	for port, secret := range secrets {
		gw.Spec.Servers = append(gw.Spec.Servers, simpleServer(port, fmt.Sprintf("https-%d", port), "shop.example.com", secret))
	}
	if _, err := istioClient(t, env).NetworkingV1().Gateways(ns).Create(context.Background(), gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// listenerSecretNames is the certificate SDS names of the TLS chains of a
// listener response, sorted, each once.
func listenerSecretNames(t *testing.T, res *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, a := range res.GetResources() {
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Errorf("listener resource: %v", err)
			continue
		}
		for _, fc := range l.GetFilterChains() {
			tc := fc.GetTransportSocket().GetTypedConfig()
			d := &tlsv3.DownstreamTlsContext{}
			if tc == nil || tc.UnmarshalTo(d) != nil {
				continue
			}
			for _, c := range d.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				out = append(out, c.GetName())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pushed reads responses, without asking again, acknowledging each (those
// of typeURL for the names subscribed), until
// one of typeURL satisfies ok: nil then, the stream's error if it ends,
// DeadlineExceeded after 30 s.
func (s *sidecarStream) pushed(typeURL string, subscribed []string, ok func(*discoveryv3.DiscoveryResponse) bool) error {
	type result struct {
		done bool
		err  error
	}
	out := make(chan result, 1)
	go func() {
		for {
			res, err := s.st.Recv()
			if err != nil {
				out <- result{err: err}
				return
			}
			ack := &discoveryv3.DiscoveryRequest{TypeUrl: res.GetTypeUrl(), VersionInfo: res.GetVersionInfo(), ResponseNonce: res.GetNonce()}
			if res.GetTypeUrl() == typeURL {
				ack.ResourceNames = subscribed
			}
			_ = s.st.Send(ack)
			if res.GetTypeUrl() == typeURL && ok(res) {
				out <- result{done: true}
				return
			}
		}
	}()
	select {
	case r := <-out:
		return r.err
	case <-time.After(30 * time.Second):
		return status.Error(codes.DeadlineExceeded, "no such response")
	}
}

// certsOf is the certificate chains of a Secret response, by name (a
// validation context's CA under its name too); a resource that does not
// decode is under its name with nothing.
func certsOf(t *testing.T, res *discoveryv3.DiscoveryResponse) map[string][]byte {
	out := map[string][]byte{}
	for _, a := range res.GetResources() {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Errorf("secret resource: %v", err)
			continue
		}
		out[s.GetName()] = append(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes(),
			s.GetValidationContext().GetTrustedCa().GetInlineBytes()...)
	}
	return out
}

func equalCerts(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func secretNames(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// readerSecretsBlock is what global.readerSecrets adds to the remote
// reader's ClusterRole, in docs/rbac.md.
var readerSecretsBlock = regexp.MustCompile("(?s)```yaml remote-reader-secrets\n(.*?)```")

// grantReaderSecrets gives ns/sa of env's cluster docs/rbac.md's rules of
// global.readerSecrets, and nothing else, beside the reader's.
func grantReaderSecrets(t *testing.T, env *testenv.Env, ns, sa string) {
	t.Helper()
	const doc = "../../docs/rbac.md"
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	m := readerSecretsBlock.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: no remote-reader-secrets block", doc)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(m[1], &role); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	role.Name += "-secrets" // beside the reader's, which the test grants under that name
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
