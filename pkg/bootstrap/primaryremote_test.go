package bootstrap

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// staticBundles publishes one bundle.
type staticBundles struct{ b *ca.Bundle }

func (s staticBundles) Subscribe() (<-chan *ca.Bundle, func()) {
	ch := make(chan *ca.Bundle, 1)
	ch <- s.b
	return ch, func() {}
}

// The duty run for a controlled remote cluster writes istio-ca-root-cert
// into its namespaces under its Lease and the caBundle of the webhook
// configurations of istiod's names, with the remote's client only; it
// stops when its context ends.
func TestRemoteDutyKeepsTheRemotesRootCertAndWebhooks(t *testing.T) {
	root := catest.NewRoot(t)
	bundle := &ca.Bundle{Version: 1, Roots: []*x509.Certificate{root.Cert}, PEM: root.CertPEM}
	cfg := Config{Namespace: "istio-system"}
	remote := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.mutatingWebhookName()},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "namespace.sidecar-injector.istio.io"}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.validatingWebhookName()},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "rev.validation.istio.io"}}},
	)
	local := fake.NewClientset()
	k := newKubePartsWithClient(local, "istio-system", "istiod-0", catest.Logger(t))
	duty := k.remoteDuty(cfg, staticBundles{bundle})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		duty(ctx, "cluster-b", remote)
	}()

	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, ns := range []string{"istio-system", "app"} {
			cm, err := remote.CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
			ok = ok && err == nil && cm.Data["root-cert.pem"] == string(root.CertPEM)
		}
		m, err := remote.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, cfg.mutatingWebhookName(), metav1.GetOptions{})
		ok = ok && err == nil && bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, root.CertPEM)
		v, err := remote.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cfg.validatingWebhookName(), metav1.GetOptions{})
		ok = ok && err == nil && bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, root.CertPEM)
		if ok {
			if v.Webhooks[0].FailurePolicy != nil {
				t.Errorf("the remote's validating webhook failurePolicy set to %s; it is left as installed", *v.Webhooks[0].FailurePolicy)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the remote's ConfigMaps and caBundles were not written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := remote.CoordinationV1().Leases("istio-system").Get(ctx, "istio-namespace-controller-election", metav1.GetOptions{}); err != nil {
		t.Errorf("no Lease in the remote: %v", err)
	}
	for _, a := range local.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("the local cluster written for the remote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the duty did not return when cancelled")
	}
}

// Without --external-istiod no controller of remote clusters is built.
func TestPrimaryRemoteNeedsExternalIstiod(t *testing.T) {
	for external, want := range map[bool]bool{false: false, true: true} {
		k := newKubePartsWithClient(fake.NewClientset(), "istio-system", "istiod-0", catest.Logger(t))
		if err := k.watchRemoteClusters(Config{ClusterID: "cluster-a"}, nil); err != nil {
			t.Fatal(err)
		}
		root := catest.NewRoot(t)
		b := staticBundles{&ca.Bundle{Version: 1, Roots: []*x509.Certificate{root.Cert}, PEM: root.CertPEM}}
		if err := k.controlRemotes(Config{ClusterID: "cluster-a", ExternalIstiod: external}, b, nil); err != nil {
			t.Fatal(err)
		}
		if got := k.remoteControl != nil; got != want {
			t.Errorf("external-istiod %v: controller built %v", external, got)
		}
	}
}
