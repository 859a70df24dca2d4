package xds

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// TestRouterGetsItsCredentialsOverSDS: a router (pilot-agent in router
// mode, namespace gw, service account ingress) gets the credentialName
// Secrets its listeners name over ADS, under the rules of any proxy: of
// its own namespace, with a SubjectAccessReview, pushed when the Secret
// changes. A Gateway server naming another namespace's Secret is not
// served and counted; the Secret is not served either when asked for
// directly; the gateway's other servers keep serving.
func TestRouterGetsItsCredentialsOverSDS(t *testing.T) {
	root := catest.NewRoot(t)
	cert := catest.NewIntermediate(t, root, catest.WithoutCA())
	h, client := newSDSHarness(t, true, newBundles(root), gwSecret("cert", cert, root.CertPEM), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": cert.CertPEM, "tls.key": cert.KeyPEM},
	})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res := *modeltest.Load(t, baseManifests).Resources()
	res.Gateways = []*model.Gateway{ingressGateway("public", start,
		httpsServer(443, "https", "cert", "shop.example.com"),
		httpsServer(8443, "https", "other/cert", "shop.example.com"))}
	h.store.Publish(model.Build("gateways", model.Options{}, res))
	waitFor(t, "the Gateway pushed", func() bool { return h.srv.state.Load().snap.Version == "gateways" })

	st := h.stream(ingressIdentity)
	node := routerNode("gw", "ingress", "10.0.3.1", map[string]any{"istio": "ingressgateway"}, nil)
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	var names []string
	for _, a := range r.GetResources() {
		l := unmarshal(t, a, &listener.Listener{})
		for _, fc := range l.GetFilterChains() {
			ctx := unmarshal(t, fc.GetTransportSocket().GetTypedConfig(), &tlsv3.DownstreamTlsContext{})
			for _, c := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				names = append(names, l.GetName()+" "+c.GetName())
			}
		}
	}
	if want := []string{"0.0.0.0_443 kubernetes://cert"}; !slices.Equal(names, want) {
		t.Fatalf("listeners name secrets %v, want %v", names, want)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused server counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Gateway", "server_refused")) == 1
	})

	// Envoy asks for what its listeners name; a tampered or stale one
	// asks for more.
	secrets := []string{"kubernetes://cert", "kubernetes://other/cert"}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: secrets}); err != nil {
		t.Fatal(err)
	}
	var got map[string]*tlsv3.Secret
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := recv(t, st)
		got = secretsOf(t, r)
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeSecret, ResourceNames: secrets, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 1 || !bytes.Equal(got["kubernetes://cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(), cert.CertPEM) {
		t.Fatalf("got secrets %v, want the gateway namespace's cert alone", keys(got))
	}
	if n := refusedCount(t, h, "cross_namespace"); n < 1 {
		t.Errorf("bulwark_sds_refused_total{reason=cross_namespace} = %v", n)
	}

	next := catest.NewIntermediate(t, root, catest.WithoutCA())
	if _, err := client.CoreV1().Secrets("gw").Update(context.Background(), gwSecret("cert", next, root.CertPEM), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = recv(t, st)
	if got := secretsOf(t, r)["kubernetes://cert"]; !bytes.Equal(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), next.CertPEM) {
		t.Fatal("the updated certificate was not pushed to the router")
	}
}

// refusedCount is bulwark_sds_refused_total{reason} in the harness's
// registry.
func refusedCount(t *testing.T, h *harness, reason string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "bulwark_sds_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
