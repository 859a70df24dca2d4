package bootstrap

import (
	"context"
	"crypto/x509"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

// changingBundles publishes each bundle to every subscriber.
type changingBundles struct {
	mu   sync.Mutex
	cur  *ca.Bundle
	subs []chan *ca.Bundle
}

func (c *changingBundles) Subscribe() (<-chan *ca.Bundle, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan *ca.Bundle, 1)
	ch <- c.cur
	c.subs = append(c.subs, ch)
	return ch, func() {}
}

func (c *changingBundles) publish(b *ca.Bundle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = b
	for _, ch := range c.subs {
		select {
		case <-ch: // replace what was not read
		default:
		}
		ch <- b
	}
}

// A root rotation's data plane holds, beside the local namespaces, those
// of each remote cluster this istiod controls whose istio-ca-root-cert
// lacks the new root, and the whole cluster while its ConfigMaps are not
// listed; nothing of a remote it no longer controls.
func TestRotationWaitsForTheControlledRemotesConfigMaps(t *testing.T) {
	oldRoot, newRoot := catest.NewRoot(t), catest.NewRoot(t)
	cfg := Config{Namespace: "istio-system"}
	remote := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}},
	)
	var frozen atomic.Bool // the remote refuses ConfigMap updates
	remote.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if frozen.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", nil)
		}
		return false, nil, nil
	})
	k := newKubePartsWithClient(fake.NewClientset(), "istio-system", "istiod-0", catest.Logger(t))
	if got := k.remoteRoots.missing(newRoot.Cert); len(got) != 0 {
		t.Fatalf("no remote controlled, yet waiting for %v", got)
	}
	// A remote whose namespaces and ConfigMaps are not listed yet holds a
	// rotation as a whole.
	unlisted, err := rootcert.New(rootcert.Config{Client: fake.NewClientset(), Namespace: "istio-system", Identity: "istiod-0",
		Bundles: staticBundles{&ca.Bundle{PEM: oldRoot.CertPEM}}, Logger: catest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	remove := k.remoteRoots.add("cluster-c", unlisted)
	if got := k.remoteRoots.missing(newRoot.Cert); !slices.Equal(got, []string{"cluster-c/*"}) {
		t.Fatalf("a remote not listed yet: waiting for %q, want cluster-c/*", got)
	}
	remove()
	bundles := &changingBundles{cur: &ca.Bundle{Version: 1, Roots: []*x509.Certificate{oldRoot.Cert}, PEM: oldRoot.CertPEM}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.remoteDuty(cfg, bundles)(ctx, "cluster-b", remote)
	}()
	waitMissing := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := k.remoteRoots.missing(newRoot.Cert)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waiting for %q, want %q", what, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, ns := range []string{"istio-system", "app"} {
		for {
			cm, err := remote.CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
			if err == nil && cm.Data["root-cert.pem"] == string(oldRoot.CertPEM) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the old root not written in the remote", ns)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitMissing("the old root written", "cluster-b/app", "cluster-b/istio-system")

	// The new root is published, but the remote takes no update: the
	// rotation keeps waiting for both namespaces.
	frozen.Store(true)
	both := &ca.Bundle{Version: 2, Roots: []*x509.Certificate{oldRoot.Cert, newRoot.Cert}, PEM: append(append([]byte{}, oldRoot.CertPEM...), newRoot.CertPEM...)}
	bundles.publish(both)
	for range 20 {
		if got := k.remoteRoots.missing(newRoot.Cert); len(got) != 2 {
			t.Fatalf("the remote refusing updates, waiting for %q, want both namespaces", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	frozen.Store(false)
	waitMissing("the remote updated") // retried by the controller
	for _, ns := range []string{"istio-system", "app"} {
		cm, err := remote.CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil || cm.Data["root-cert.pem"] != string(both.PEM) {
			t.Fatalf("%s: %v", ns, err)
		}
	}

	// A remote no longer controlled holds nothing.
	cancel()
	<-done
	if got := k.remoteRoots.missing(newRoot.Cert); len(got) != 0 {
		t.Fatalf("a remote no longer controlled, yet waiting for %v", got)
	}
}
