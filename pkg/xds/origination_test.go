package xds

import (
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// TestSidecarGetsItsCredentialNameSecret plays an Envoy sidecar whose
// DestinationRule originates MUTUAL TLS with a credentialName: the cluster
// names the Secret over ADS, and the same stream gets it, in the
// sidecar's namespace and for its service account only.
func TestSidecarGetsItsCredentialNameSecret(t *testing.T) {
	root := catest.NewRoot(t)
	client := catest.NewIntermediate(t, root, catest.WithoutCA())
	h, _ := newSDSHarness(t, true, newBundles(root), gwSecret("cert", client, root.CertPEM), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": client.CertPEM, "tls.key": client.KeyPEM},
	})
	h.store.Publish(modeltest.Load(t, baseManifests+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: gw}
spec:
  host: echo.app.svc.cluster.local
  workloadSelector: {matchLabels: {app: ingress}}
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: cert, sni: echo.example.com}}
`))

	st := h.stream(ingressID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("gw", "ingress", "10.0.0.9"), TypeUrl: typeCluster}); err != nil {
		t.Fatal(err)
	}
	// The rule is published after the harness started: wait for a push
	// that has it.
	var names []string
	for deadline := time.Now().Add(10 * time.Second); names == nil; {
		r := recv(t, st)
		names = credentialSecrets(t, r)
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeCluster, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no cluster originating TLS with the rule's credentialName")
		}
	}
	if want := []string{"kubernetes://cert", "kubernetes://cert-cacert"}; !slices.Equal(names, want) {
		t.Fatalf("cluster names secrets %v, want %v", names, want)
	}

	// What the cluster names is served; another namespace's Secret is
	// not, though the service account may read it.
	ask := append(names, "kubernetes://other/cert")
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: ask}); err != nil {
		t.Fatal(err)
	}
	var got map[string]*tlsv3.Secret
	for deadline := time.Now().Add(10 * time.Second); ; { // until the informer syncs
		r := recv(t, st)
		got = secretsOf(t, r)
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: ask, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if len(got) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 2 || got["kubernetes://other/cert"] != nil || got["kubernetes://cert"].GetTlsCertificate().GetPrivateKey() == nil ||
		got["kubernetes://cert-cacert"].GetValidationContext().GetTrustedCa() == nil {
		t.Fatalf("served %v, want the client certificate and CA of the sidecar's namespace only", keys(got))
	}

	// Another service account of the namespace, which may not read the
	// Secret, gets nothing.
	other := h.stream("spiffe://cluster.local/ns/gw/sa/client")
	if err := other.Send(&discovery.DiscoveryRequest{Node: envoyNode("gw", "client", "10.0.0.10"), TypeUrl: typeSecret, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(t, recv(t, other)); len(got) != 0 {
		t.Fatalf("a service account without access got %v", keys(got))
	}
}

// credentialSecrets are the secrets the TLS context of echo's cluster in
// r names, each checked to come over ADS; nil when it has no TLS socket.
func credentialSecrets(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	for _, a := range r.GetResources() {
		var c cluster.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetName() != "outbound|8080||echo.app.svc.cluster.local" || c.GetTransportSocket() == nil {
			continue
		}
		var up tlsv3.UpstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
			t.Fatal(err)
		}
		var names []string
		common := up.GetCommonTlsContext()
		for _, s := range append(common.GetTlsCertificateSdsSecretConfigs(), common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()) {
			if s.GetSdsConfig().GetAds() == nil {
				t.Errorf("secret %s not over ADS: %v", s.GetName(), s.GetSdsConfig())
			}
			names = append(names, s.GetName())
		}
		return names
	}
	return nil
}

// TestSidecarGetsItsCredentialNameSecretOverDelta is the same over
// incremental ADS, which pilot-agent speaks upstream by default.
func TestSidecarGetsItsCredentialNameSecretOverDelta(t *testing.T) {
	root := catest.NewRoot(t)
	client := catest.NewIntermediate(t, root, catest.WithoutCA())
	h, _ := newSDSHarness(t, true, newBundles(root), gwSecret("cert", client, root.CertPEM), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": client.CertPEM, "tls.key": client.KeyPEM},
	})
	st := h.deltaStream(ingressID)
	names := []string{"kubernetes://cert", "kubernetes://cert-cacert", "kubernetes://other/cert"}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode("gw", "ingress", "10.0.0.9"), TypeUrl: typeSecret, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(held) < 2 && time.Now().Before(deadline); { // until the informer syncs
		r := recvDelta(t, st)
		if r.GetTypeUrl() != typeSecret {
			t.Fatalf("a %s response", r.GetTypeUrl())
		}
		for _, res := range r.GetResources() {
			var s tlsv3.Secret
			if err := res.GetResource().UnmarshalTo(&s); err != nil {
				t.Fatal(err)
			}
			held[s.GetName()] = true
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeSecret, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	if len(held) != 2 || !held["kubernetes://cert"] || !held["kubernetes://cert-cacert"] {
		t.Fatalf("held %v, want the client certificate and CA of the sidecar's namespace only", held)
	}
}
