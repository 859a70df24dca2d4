package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
)

// bundles is a trust bundle whose roots the test replaces.
type bundles struct {
	cur  chan *ca.Bundle // holds the current bundle
	subs chan chan *ca.Bundle
}

func newBundles(root *catest.Cert) *bundles {
	b := &bundles{cur: make(chan *ca.Bundle, 1), subs: make(chan chan *ca.Bundle, 4)}
	b.cur <- &ca.Bundle{Version: 1, Roots: nil, PEM: root.CertPEM}
	return b
}

func (b *bundles) Current() *ca.Bundle {
	cur := <-b.cur
	b.cur <- cur
	return cur
}

func (b *bundles) Subscribe() (<-chan *ca.Bundle, func()) {
	ch := make(chan *ca.Bundle, 1)
	b.subs <- ch
	return ch, func() {}
}

func (b *bundles) set(root *catest.Cert) {
	old := <-b.cur
	next := &ca.Bundle{Version: old.Version + 1, PEM: root.CertPEM}
	b.cur <- next
	for {
		select {
		case ch := <-b.subs:
			ch <- next
			defer func() { b.subs <- ch }()
		default:
			return
		}
	}
}

// newSDSHarness runs an ADS server with secrets from a fake clientset
// holding objs, where the SubjectAccessReviews of system:serviceaccount:gw:ingress
// allow every Secret of namespace gw; with useTLS the stream is TLS.
func newSDSHarness(t *testing.T, useTLS bool, b *bundles, objs ...runtime.Object) (*harness, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:gw:ingress" && sar.Spec.ResourceAttributes.Namespace == "gw"
		return true, sar, nil
	})
	reg := prometheus.NewRegistry()
	secrets, err := sds.New(sds.Config{
		Bundles: b, Client: client, Logger: catest.Logger(t), Registerer: reg,
		Authorizer: sds.NewSARAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), 0, 0, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	store.Publish(modeltest.Load(t, baseManifests))
	srv, err := New(Config{
		Model: store, Authenticator: headerAuth{}, TrustDomain: testTD, Registerer: reg,
		Logger: catest.Logger(t), Secrets: secrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	root := catest.NewRoot(t)
	serving := catest.NewIntermediate(t, root, catest.WithoutCA())
	serverCreds, clientCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if useTLS {
		cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		serverCreds = credentials.NewServerTLSFromCert(&cert)
		// The server's certificate is not under test here.
		clientCreds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(grpc.Creds(serverCreds))
	srv.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = secrets.Run(ctx); done <- struct{}{} }()
	go func() { _ = srv.Run(ctx); done <- struct{}{} }()
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(clientCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		<-done
		<-done
		gs.Stop()
	})
	return &harness{t: t, srv: srv, store: store, reg: reg, conn: conn}, client
}

func gwSecret(name string, c *catest.Cert, caPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM, "ca.crt": caPEM},
	}
}

const ingressID = "spiffe://cluster.local/ns/gw/sa/ingress"

func secretsOf(t *testing.T, r *discovery.DiscoveryResponse) map[string]*tlsv3.Secret {
	t.Helper()
	if r.GetTypeUrl() != typeSecret {
		t.Fatalf("response of type %s", r.GetTypeUrl())
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range r.GetResources() {
		var s tlsv3.Secret
		if err := a.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = &s
	}
	return out
}

func TestSecretsOverTLS(t *testing.T) {
	root := catest.NewRoot(t)
	gw := catest.NewIntermediate(t, root, catest.WithoutCA())
	b := newBundles(root)
	h, client := newSDSHarness(t, true, b, gwSecret("cert", gw, root.CertPEM), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": gw.CertPEM, "tls.key": gw.KeyPEM},
	})
	st := h.stream(ingressID)
	names := []string{"ROOTCA", "kubernetes://cert", "kubernetes://cert-cacert", "kubernetes://other/cert"}
	req := &discovery.DiscoveryRequest{Node: testNode("gw", "ingress", nil), TypeUrl: typeSecret, ResourceNames: names}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	// Until the informer syncs only ROOTCA is there; wait for the rest.
	var got map[string]*tlsv3.Secret
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := recv(t, st)
		got = secretsOf(t, r)
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if len(got) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 3 || got["kubernetes://other/cert"] != nil {
		t.Fatalf("got secrets %v, want ROOTCA, cert and cert-cacert and not another namespace's", keys(got))
	}
	if !bytes.Equal(got["ROOTCA"].GetValidationContext().GetTrustedCa().GetInlineBytes(), root.CertPEM) ||
		!bytes.Equal(got["kubernetes://cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(), gw.CertPEM) ||
		!bytes.Equal(got["kubernetes://cert-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes(), root.CertPEM) {
		t.Fatal("wrong material served")
	}

	next := catest.NewIntermediate(t, root, catest.WithoutCA())
	if _, err := client.CoreV1().Secrets("gw").Update(context.Background(), gwSecret("cert", next, root.CertPEM), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if got := secretsOf(t, r)["kubernetes://cert"]; !bytes.Equal(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), next.CertPEM) {
		t.Fatal("the updated certificate was not pushed")
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}

	rotated := catest.NewRoot(t)
	b.set(rotated)
	r = recv(t, st)
	if got := secretsOf(t, r)["ROOTCA"]; !bytes.Equal(got.GetValidationContext().GetTrustedCa().GetInlineBytes(), rotated.CertPEM) {
		t.Fatal("the new trust bundle was not pushed")
	}
}

func TestSecretsRefusedOnPlaintext(t *testing.T) {
	root := catest.NewRoot(t)
	h, _ := newSDSHarness(t, false, newBundles(root), gwSecret("cert", catest.NewIntermediate(t, root, catest.WithoutCA()), root.CertPEM))
	st := h.stream(ingressID)
	req := &discovery.DiscoveryRequest{Node: testNode("gw", "ingress", nil), TypeUrl: typeSecret, ResourceNames: []string{"ROOTCA", "kubernetes://cert"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(t, recv(t, st)); len(got) != 0 {
		t.Fatalf("a plaintext stream got %v", keys(got))
	}
	// The stream stays up and serves other types.
	if r := noResponse(t, st, typeListener); r.GetTypeUrl() != typeListener {
		t.Fatal("no listener response")
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
