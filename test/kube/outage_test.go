package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

// Log lines of the API server monitor.
const (
	logUnreachable = "kubernetes API server unreachable"
	logBack        = "kubernetes API server reachable again"
)

var peerAuthentications = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}

// outageMesh is what the outage test serves: in app, the Service echo
// with an istio-labelled endpoint, a PeerAuthentication turning mTLS off
// (so the client's cluster has no TLS until it is deleted), and the
// gateway Secret gw-cert.
type outageMesh struct {
	app         string
	clusterName string
	gwRoot      *catest.Cert
	gwFirst     *catest.Cert // gw-cert's certificate before the rotation
}

func newOutageMesh(t *testing.T, env *testenv.Env) *outageMesh {
	t.Helper()
	client := env.Client(t)
	ctx := context.Background()
	m := &outageMesh{app: env.Namespace(t), gwRoot: catest.NewRoot(t)}
	m.clusterName = "outbound|8080||echo." + m.app + ".svc.cluster.local"
	for _, sa := range []string{"echo", "client", "gw", "cached", "fresh"} {
		_ = env.ServiceAccountToken(t, m.app, sa, nil, nil) // creates the account
	}
	if _, err := client.CoreV1().Services(m.app).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9000)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, client, m.app, "echo-1", "echo", "10.20.0.1", map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"})
	port, name := int32(9000), "grpc"
	if _, err := client.DiscoveryV1().EndpointSlices(m.app).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{podEndpoint(pod)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
		"metadata": map[string]any{"name": "plaintext"},
		"spec":     map[string]any{"mtls": map[string]any{"mode": "DISABLE"}},
	}}
	if _, err := dynamicClient(t, env).Resource(peerAuthentications).Namespace(m.app).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.gwFirst = m.gwLeaf(t)
	if _, err := client.CoreV1().Secrets(m.app).Create(ctx, tlsSecret("gw-cert", m.gwFirst), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantGet(t, client, m.app, "gw-cert", m.app, "gw")
	return m
}

func (m *outageMesh) gwLeaf(t *testing.T) *catest.Cert {
	return catest.NewIntermediate(t, m.gwRoot, catest.WithoutCA(), catest.WithCommonName("gw.example.com"))
}

func dynamicClient(t *testing.T, env *testenv.Env) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// clusterTLS: the cluster of echo, with mTLS or without.
func clusterTLS(name string, mtls bool) func([]*cluster.Cluster) bool {
	return func(cs []*cluster.Cluster) bool {
		return len(cs) == 1 && cs[0].GetName() == name && (cs[0].GetTransportSocket() != nil) == mtls
	}
}

// secretIs: the gateway's Secret holds want.
func secretIs(want *catest.Cert) func([]*tlsv3.Secret) bool {
	return func(ss []*tlsv3.Secret) bool {
		return len(ss) == 1 && string(ss[0].GetTlsCertificate().GetCertificateChain().GetInlineBytes()) == string(want.CertPEM)
	}
}

// leaderOf names the istiod holding the namespace-controller Lease, or "".
func leaderOf(t *testing.T, client kubernetes.Interface, ns string, ps ...*istiod) string {
	t.Helper()
	lease, err := client.CoordinationV1().Leases(ns).Get(context.Background(), rootcert.LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	for _, p := range ps {
		if strings.HasPrefix(*lease.Spec.HolderIdentity, p.name+"_") {
			return p.name
		}
	}
	return ""
}

// leading reports whether p's log says it currently leads the namespace
// controller: its last term began and has not stopped.
func (p *istiod) leading() bool {
	logs := p.logs.String()
	return strings.LastIndex(logs, `msg="leading: distributing`) > strings.LastIndex(logs, `msg="stopped leading"`)
}

// TestAPIServerGoesAwayAndComesBack stops the API server and etcd under
// two running istiods, checks what keeps working, has changes made while
// istiod cannot reach the API server, and checks that istiod catches up
// once it can. istiod reaches the API server through a link the test can
// cut, so that changes can be made while istiod cannot see them.
func TestAPIServerGoesAwayAndComesBack(t *testing.T) {
	t.Parallel()
	env, ns, apiHost := privateCluster(t)
	client := env.Client(t)
	lnk := newLink(t, apiHost)
	kubeconfig := kubeconfigVia(t, istiodKubeconfig(t, env, ns), env.URL, lnk.URL())
	a, b := newIstiodIn(t, env, "istiod-a", ns, kubeconfig), newIstiodIn(t, env, "istiod-b", ns, kubeconfig)
	a.run(t)
	b.run(t)
	waitFor(t, "both istiods ready", 90*time.Second, func() bool { return a.ready() && b.ready() })
	both := []*istiod{a, b}

	mesh := newOutageMesh(t, env)
	roots := a.roots(t, env)
	clientCert := a.workloadCert(t, env, roots, mesh.app, "client")
	gwCert := a.workloadCert(t, env, roots, mesh.app, "gw")
	// A token reviewed before the outage is cached for authn.DefaultCacheTTL;
	// one never reviewed has no cached review.
	cachedToken := env.ServiceAccountToken(t, mesh.app, "cached", []string{"istio-ca"}, nil)
	if err := a.csr(roots, mesh.app, "cached", nil, cachedToken); err != nil {
		t.Fatalf("token CSR before the outage: %v", err)
	}
	cachedAt := time.Now()
	freshToken := env.ServiceAccountToken(t, mesh.app, "fresh", []string{"istio-ca"}, nil)

	ads := a.dialADS(t, roots, clientCert, mesh.app, "client")
	ads.subscribe(typeCluster, mesh.clusterName)
	await(ads, "echo's cluster without mTLS (PeerAuthentication DISABLE)", typeCluster, clusterTLS(mesh.clusterName, false))
	gw := a.dialADS(t, roots, gwCert, mesh.app, "gw")
	gw.subscribe(typeSecret, "kubernetes://gw-cert")
	await(gw, "the gateway's Secret", typeSecret, secretIs(mesh.gwFirst))
	waitFor(t, "a leader", 60*time.Second, func() bool { return leaderOf(t, client, ns, a, b) != "" })
	for _, p := range both {
		if got := p.metric(t, "bulwark_kube_apiserver_reachable"); got != 1 {
			t.Fatalf("%s: bulwark_kube_apiserver_reachable = %v before the outage, want 1", p.name, got)
		}
	}

	// Down: the API server and etcd are stopped.
	env.Stop(t)
	downAt := time.Now()
	t.Logf("API server and etcd stopped")
	for _, p := range both {
		waitFor(t, p.name+" noticing the outage", 30*time.Second, func() bool {
			return p.metric(t, "bulwark_kube_apiserver_reachable") == 0
		})
		t.Logf("%s: outage noticed after %v", p.name, time.Since(downAt).Round(time.Millisecond))
	}

	// Within the cache TTL, the token reviewed before is still accepted.
	if err := a.csr(roots, mesh.app, "cached", nil, cachedToken); err != nil {
		t.Errorf("token with a cached review, during the outage: %v", err)
	}
	// A token never reviewed is told to retry, never refused for good.
	if err := a.csr(roots, mesh.app, "fresh", nil, freshToken); status.Code(err) != codes.Unavailable {
		t.Errorf("token without a cached review, during the outage: %v, want Unavailable", err)
	}

	// So is a proxy authenticating its xDS stream with such a token.
	if err := a.adsWithToken(roots, mesh.app, "fresh", freshToken); status.Code(err) != codes.Unavailable {
		t.Errorf("xDS with a token without a cached review, during the outage: %v, want Unavailable", err)
	}

	// A new proxy gets the last synced model from either istiod.
	late := b.dialADS(t, roots, clientCert, mesh.app, "client")
	late.subscribe(typeCluster, mesh.clusterName)
	await(late, "a new proxy: echo's cluster from the last synced model", typeCluster, clusterTLS(mesh.clusterName, false))

	// For the rest of the outage, and past the cache TTL: certificates for
	// client certificates keep being signed, injection keeps answering,
	// /ready stays 200, the connected proxies keep their streams.
	holdUntil := cachedAt.Add(authn.DefaultCacheTTL + 5*time.Second)
	if min := downAt.Add(45 * time.Second); holdUntil.Before(min) {
		holdUntil = min // longer than the Lease: the leader loses it
	}
	var signed, injected, readyChecks int
	for time.Now().Before(holdUntil) {
		for _, p := range both {
			if err := p.csr(roots, mesh.app, "client", &clientCert, ""); err != nil {
				t.Fatalf("%s: client-certificate CSR during the outage: %v", p.name, err)
			}
			signed++
			if err := p.inject(roots); err != nil {
				t.Fatalf("%s: /inject during the outage: %v", p.name, err)
			}
			injected++
			code, body := p.readyStatus()
			if code != 200 || !strings.Contains(body, "unreachable") {
				t.Fatalf("%s: /ready during the outage: %d %q, want 200 saying the API server is unreachable", p.name, code, body)
			}
			readyChecks++
		}
		// Nothing changed, so nothing is pushed: above all not a model
		// emptied for want of the API server.
		for _, c := range []*adsClient{ads, gw, late} {
			select {
			case err := <-c.errc:
				t.Fatalf("a proxy's stream ended during the outage: %v", err)
			case r := <-c.resps:
				t.Fatalf("a push during the outage: %s version %s, %d resources", r.TypeUrl, r.VersionInfo, len(r.Resources))
			default:
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	outage := time.Since(downAt)
	t.Logf("during %v of outage: %d client-certificate CSRs signed, %d injections, %d /ready checks, all answered",
		outage.Round(time.Second), signed, injected, readyChecks)
	// Past the cache TTL, the cached token has no review left: retry.
	if err := a.csr(roots, mesh.app, "cached", nil, cachedToken); status.Code(err) != codes.Unavailable {
		t.Errorf("token whose cached review expired, during the outage: %v, want Unavailable", err)
	}
	// The Lease could not be renewed: no replica leads, so none writes.
	if a.leading() || b.leading() {
		t.Errorf("after %v without the API server: istiod-a leads %t, istiod-b leads %t; want neither",
			outage.Round(time.Second), a.leading(), b.leading())
	}
	for _, p := range both {
		if n := countLines(p.logs.String(), logUnreachable); n != 1 {
			t.Errorf("%s: %d %q lines during one outage of %d requests, want 1", p.name, n, logUnreachable, signed+injected)
		}
		if got := p.metric(t, "bulwark_kube_apiserver_outages_total"); got != 1 {
			t.Errorf("%s: bulwark_kube_apiserver_outages_total = %v, want 1", p.name, got)
		}
	}

	// The API server comes back, but istiod cannot reach it yet: changes
	// are made that istiod has not seen.
	lnk.Cut()
	t.Logf("API server and etcd restarted in %v", env.Restart(t).Round(time.Millisecond))
	ctx := context.Background()
	created := env.Namespace(t)
	if err := dynamicClient(t, env).Resource(peerAuthentications).Namespace(mesh.app).Delete(ctx, "plaintext", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := mesh.gwLeaf(t)
	secret, err := client.CoreV1().Secrets(mesh.app).Get(ctx, "gw-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = tlsSecret("gw-cert", rotated).Data
	if _, err := client.CoreV1().Secrets(mesh.app).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	logMarks := map[*istiod]int{a: len(a.logs.String()), b: len(b.logs.String())}

	// Back: istiod reaches the API server again.
	lnk.Restore()
	backAt := time.Now()
	since := func() time.Duration { return time.Since(backAt).Round(time.Millisecond) }
	for _, p := range both {
		waitFor(t, p.name+" seeing the API server back", 60*time.Second, func() bool {
			return p.metric(t, "bulwark_kube_apiserver_reachable") == 1
		})
		t.Logf("%s: API server seen back after %v", p.name, since())
	}
	await(ads, "the deleted PeerAuthentication applied: echo's cluster with mTLS", typeCluster, clusterTLS(mesh.clusterName, true))
	t.Logf("deleted PeerAuthentication applied after %v", since())
	await(gw, "the rotated Secret", typeSecret, secretIs(rotated))
	t.Logf("rotated Secret pushed after %v", since())
	waitFor(t, "istio-ca-root-cert in the namespace created during the outage", 60*time.Second, func() bool {
		cm, err := client.CoreV1().ConfigMaps(created).Get(ctx, rootcert.ConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[rootcert.DataKey] != ""
	})
	t.Logf("istio-ca-root-cert created in the new namespace after %v", since())
	if err := a.csr(roots, mesh.app, "fresh", nil, freshToken); err != nil {
		t.Errorf("token CSR after the outage: %v", err)
	}
	if err := a.adsWithToken(roots, mesh.app, "fresh", freshToken); err != nil {
		t.Errorf("xDS with a token after the outage: %v", err)
	}

	// Exactly one replica leads, and the Lease names it.
	var leader string
	waitFor(t, "one leader after the outage", 60*time.Second, func() bool {
		leader = leaderOf(t, client, ns, a, b)
		return leader != "" && a.leading() != b.leading()
	})
	t.Logf("%s leads the namespace controller %v after the API server came back", leader, since())
	// The other replica reads the Lease at each attempt to acquire it:
	// after its second read from now, an attempt made while the leader
	// leads has ended, and a second leader would show.
	follower := a
	if leader == a.name {
		follower = b
	}
	reads := countLines(follower.logs.String(), `msg="`+rootcert.LogLeaseRead+`"`)
	waitFor(t, follower.name+" trying for the Lease twice more", 60*time.Second, func() bool {
		return countLines(follower.logs.String(), `msg="`+rootcert.LogLeaseRead+`"`) >= reads+2
	})
	if a.leading() == b.leading() {
		t.Errorf("leading: istiod-a %t, istiod-b %t; want exactly one", a.leading(), b.leading())
	}
	if got := leaderOf(t, client, ns, a, b); got != leader || !map[string]bool{a.name: a.leading(), b.name: b.leading()}[got] {
		t.Errorf("the Lease names %q, which does not lead (%s was)", got, leader)
	}
	for _, p := range both {
		select {
		case <-p.exited:
			t.Fatalf("%s exited: it must ride out the outage", p.name)
		default:
		}
		if n := countLines(p.logs.String()[logMarks[p]:], logBack); n != 1 {
			t.Errorf("%s: %d %q lines, want 1", p.name, n, logBack)
		}
		if code, body := p.readyStatus(); code != 200 || strings.Contains(body, "unreachable") {
			t.Errorf("%s: /ready after the outage: %d %q", p.name, code, body)
		}
	}
}
