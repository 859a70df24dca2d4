package xds

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/metadata"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
)

// countingSecrets is the real SDS server, counting the secret
// generations of each proxy, by namespace/serviceAccount.
type countingSecrets struct {
	*sds.Server
	mu   sync.Mutex
	gens map[string]int
}

func (c *countingSecrets) Generate(ctx context.Context, p sds.Proxy, names []string) []*tlsv3.Secret {
	c.mu.Lock()
	c.gens[p.Namespace+"/"+p.ServiceAccount]++
	c.mu.Unlock()
	return c.Server.Generate(ctx, p, names)
}

func (c *countingSecrets) generations(ns, sa string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens[ns+"/"+sa]
}

// countingReviews is the apiserver's SubjectAccessReview API, counting
// the reviews of each user.
type countingReviews struct {
	authzclient.SubjectAccessReviewInterface
	mu     sync.Mutex
	byUser map[string]int
}

func (c *countingReviews) Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	c.mu.Lock()
	c.byUser[sar.Spec.User]++
	c.mu.Unlock()
	return c.SubjectAccessReviewInterface.Create(ctx, sar, opts)
}

func (c *countingReviews) of(ns, sa string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byUser["system:serviceaccount:"+ns+":"+sa]
}

// kubeSDS is an ADS server over TLS whose secrets come from the real
// apiserver, with generations and reviews counted.
type kubeSDS struct {
	*harness
	client  kubernetes.Interface
	secrets *countingSecrets
	reviews *countingReviews
}

// newKubeSDS runs it. Verdicts are cached for a nanosecond, that is not
// at all, so that every generation of a credentialName secret shows as
// a review: a cache must not be what keeps reviews away.
func newKubeSDS(t *testing.T, client kubernetes.Interface) *kubeSDS {
	t.Helper()
	reviews := &countingReviews{SubjectAccessReviewInterface: client.AuthorizationV1().SubjectAccessReviews(), byUser: map[string]int{}}
	srv, err := sds.New(sds.Config{
		Bundles: newBundles(catest.NewRoot(t)), Client: client, Logger: catest.Logger(t),
		Authorizer: sds.NewSARAuthorizer(reviews, time.Nanosecond, 0, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	secrets := &countingSecrets{Server: srv, gens: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	h := newTLSHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.Secrets = secrets })
	return &kubeSDS{harness: h, client: client, secrets: secrets, reviews: reviews}
}

// allowSecrets lets every service account of ns get the Secrets of ns.
func allowSecrets(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-secrets"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func putSecret(t *testing.T, client kubernetes.Interface, s *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	_, err := client.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		_, err = client.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func tlsSecretIn(ns, name string, c *catest.Cert) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM},
	}
}

// sdsClient is one proxy's stream asking for one credentialName secret.
type sdsClient struct {
	t      *testing.T
	ns, sa string
	names  []string
	st     discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	probes int
	last   *discovery.DiscoveryResponse // the last probe's
}

// probe checks that no response is queued on the stream (see
// noResponse). Each probe asks, acknowledging the last one, for a
// listener of its own, which is always answered.
func (c *sdsClient) probe() {
	c.t.Helper()
	c.probes++
	req := &discovery.DiscoveryRequest{
		TypeUrl:       typeListener,
		ResourceNames: []string{fmt.Sprintf("probe-%d.none.svc.cluster.local:1", c.probes)},
		VersionInfo:   c.last.GetVersionInfo(),
		ResponseNonce: c.last.GetNonce(),
	}
	if err := c.st.Send(req); err != nil {
		c.t.Fatal(err)
	}
	c.last = recv(c.t, c.st)
	if c.last.GetTypeUrl() != typeListener {
		c.t.Fatalf("%s/%s got an unexpected %s response (version %s)", c.ns, c.sa, c.last.GetTypeUrl(), c.last.GetVersionInfo())
	}
}

// connect opens the stream of a proxy of service account sa in ns asking
// for name, and waits for the secret.
func (k *kubeSDS) connect(ns, sa, name string) *sdsClient {
	k.t.Helper()
	c := &sdsClient{t: k.t, ns: ns, sa: sa, names: []string{"kubernetes://" + name}}
	// Longer than the harness's streams: the updates take a while on a
	// busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	k.t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-id", fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/%s", ns, sa))
	st, err := discovery.NewAggregatedDiscoveryServiceClient(k.conn).StreamAggregatedResources(ctx)
	if err != nil {
		k.t.Fatal(err)
	}
	c.st = st
	req := &discovery.DiscoveryRequest{Node: testNode(ns, sa, nil), TypeUrl: typeSecret, ResourceNames: c.names}
	if err := c.st.Send(req); err != nil {
		k.t.Fatal(err)
	}
	c.awaitCert(nil)
	return c
}

// awaitCert receives responses, ACKing each, until one holds the secret
// (with the certificate want, if not nil). The ACK is handled before
// awaitCert returns: the stream's requests are handled in order, and a
// probe after it is answered.
func (c *sdsClient) awaitCert(want []byte) {
	c.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := recv(c.t, c.st)
		got := secretsOf(c.t, r)[c.names[0]]
		ack := &discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: c.names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
		if err := c.st.Send(ack); err != nil {
			c.t.Fatal(err)
		}
		if got != nil && (want == nil || bytes.Equal(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), want)) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s/%s did not get %s", c.ns, c.sa, c.names[0])
		}
	}
	c.probe()
}

// counts are a proxy's secret generations and its service account's
// reviews.
type counts struct{ generations, reviews int }

func (k *kubeSDS) counts(c *sdsClient) counts {
	return counts{k.secrets.generations(c.ns, c.sa), k.reviews.of(c.ns, c.sa)}
}

// TestUnrelatedSecretUpdatesCostNothing updates 1,000 times Secrets no
// proxy asks for, in the namespace of a gateway and in another: the
// gateway's secrets are not generated again, and no review is made.
func TestUnrelatedSecretUpdatesCostNothing(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns, other := env.Namespace(t), env.Namespace(t)
	client := env.Client(t)
	allowSecrets(t, client, ns)
	root := catest.NewRoot(t)
	putSecret(t, client, tlsSecretIn(ns, "cert", catest.NewIntermediate(t, root, catest.WithoutCA())))
	putSecret(t, client, tlsSecretIn(ns, "sentinel", catest.NewIntermediate(t, root, catest.WithoutCA())))
	var unrelated []*corev1.Secret
	for i := range 10 {
		for _, n := range []string{ns, other} {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: fmt.Sprintf("unrelated-%d", i)}, Type: corev1.SecretTypeOpaque}
			putSecret(t, client, s)
			unrelated = append(unrelated, s)
		}
	}

	k := newKubeSDS(t, client)
	gateway := k.connect(ns, "ingress", "cert")
	canary := k.connect(ns, "canary", "sentinel")
	before := k.counts(gateway)

	start := time.Now()
	for i := range 1000 {
		s := unrelated[i%len(unrelated)].DeepCopy()
		s.Data = map[string][]byte{"n": fmt.Appendf(nil, "%d", i)}
		putSecret(t, client, s)
	}
	t.Logf("1000 updates in %v", time.Since(start))
	// A Secret the canary asks for changes after them, twice: its second
	// push shows the first one's pass over the proxies ended, and the
	// namespace's events are handled in order.
	for range 2 {
		next := catest.NewIntermediate(t, root, catest.WithoutCA())
		putSecret(t, client, tlsSecretIn(ns, "sentinel", next))
		canary.awaitCert(next.CertPEM)
	}
	if after := k.counts(gateway); after != before {
		t.Fatalf("after 1000 unrelated updates the gateway's secrets were generated %d times and %d reviews made, want none",
			after.generations-before.generations, after.reviews-before.reviews)
	}
	gateway.probe()
}

// TestChangedSecretReachesOnlyItsConsumers changes a Secret two gateways
// ask for: they get it, and neither a proxy asking for another Secret of
// the namespace nor one asking for the same name in another namespace is
// generated for.
func TestChangedSecretReachesOnlyItsConsumers(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns, other := env.Namespace(t), env.Namespace(t)
	client := env.Client(t)
	root := catest.NewRoot(t)
	for _, n := range []string{ns, other} {
		allowSecrets(t, client, n)
		putSecret(t, client, tlsSecretIn(n, "cert", catest.NewIntermediate(t, root, catest.WithoutCA())))
	}
	putSecret(t, client, tlsSecretIn(ns, "canary-cert", catest.NewIntermediate(t, root, catest.WithoutCA())))

	k := newKubeSDS(t, client)
	consumers := []*sdsClient{k.connect(ns, "ingress", "cert"), k.connect(ns, "egress", "cert")}
	bystanders := []*sdsClient{k.connect(ns, "canary", "canary-cert"), k.connect(other, "ingress", "cert")}
	before := make([]counts, len(bystanders))
	for i, b := range bystanders {
		before[i] = k.counts(b)
	}
	// Twice: a consumer's second push shows that whatever the first
	// change set off has ended.
	for range 2 {
		next := catest.NewIntermediate(t, root, catest.WithoutCA())
		putSecret(t, client, tlsSecretIn(ns, "cert", next))
		for _, c := range consumers {
			c.awaitCert(next.CertPEM)
		}
	}
	for i, b := range bystanders {
		if after := k.counts(b); after != before[i] {
			t.Errorf("%s/%s, asking for %s, was generated for %d times and reviewed %d times, want none",
				b.ns, b.sa, b.names[0], after.generations-before[i].generations, after.reviews-before[i].reviews)
		}
		b.probe()
	}
}

// hangingChecks allows every permission check, but once armed holds
// those of one service account until released.
type hangingChecks struct {
	sa       string
	armed    atomic.Bool
	started  chan struct{} // a held check began
	release  chan struct{}
	returned atomic.Bool // a held check returned
}

func (h *hangingChecks) CanReadSecret(ctx context.Context, _, sa, _ string) (bool, error) {
	if sa != h.sa || !h.armed.Load() {
		return true, nil
	}
	defer h.returned.Store(true)
	select {
	case h.started <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// TestHangingPermissionCheckHoldsUpNoOne holds the permission check of
// one gateway while a Secret two gateways ask for changes: the other gets
// the change, and the held gateway's other requests are answered, before
// the check returns.
func TestHangingPermissionCheckHoldsUpNoOne(t *testing.T) {
	root := catest.NewRoot(t)
	newLeaf := func() *catest.Cert { return catest.NewIntermediate(t, root, catest.WithoutCA()) }
	client := fake.NewClientset(tlsSecretIn("gw", "cert", newLeaf()))
	checks := &hangingChecks{sa: "ingress", started: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := sds.New(sds.Config{Bundles: newBundles(root), Client: client, Logger: catest.Logger(t), Authorizer: checks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	h := newTLSHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.Secrets = srv })
	k := &kubeSDS{harness: h, client: client}
	held, other := k.connect("gw", "ingress", "cert"), k.connect("gw", "egress", "cert")
	t.Cleanup(func() { close(checks.release) })

	checks.armed.Store(true)
	next := newLeaf()
	putSecret(t, client, tlsSecretIn("gw", "cert", next))
	<-checks.started
	other.awaitCert(next.CertPEM)
	if checks.returned.Load() {
		t.Fatal("the other gateway got the change only after the held check returned")
	}
	held.probe()
	if checks.returned.Load() {
		t.Fatal("the held gateway's listener request was answered only after its check returned")
	}
}
