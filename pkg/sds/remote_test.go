package sds

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// remoteGW is gwProxy's namesake in a remote cluster: the same namespace
// and service account, authenticated by cluster-b.
var remoteGW = Proxy{Namespace: "gw", ServiceAccount: "ingress", Secure: true, Cluster: "cluster-b"}

// refusals is the count of refusals for reason.
func (f *fixture) refusals(reason string) float64 {
	return testutil.ToFloat64(f.srv.refused.WithLabelValues(reason))
}

// TestUnregisteredClustersProxyGetsTheTrustBundleAndNoLocalSecret: a
// proxy of a cluster not registered, whose namesake of the local cluster
// may read a Secret, gets the trust bundle, and never that Secret: no
// permission check is made for it in the local cluster, and each refusal
// is counted.
func TestUnregisteredClustersProxyGetsTheTrustBundleAndNoLocalSecret(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", leaf(t, root), root.CertPEM))
	if got := f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"}); len(got) != 1 {
		t.Fatalf("the local proxy got %d secrets, want 1", len(got))
	}
	reviews := f.reviewCount()
	before := f.refusals("unknown_cluster")
	for range 3 {
		got := f.srv.Generate(context.Background(), remoteGW, []string{RootCAName, "kubernetes://tls", "kubernetes://tls-cacert"})
		if len(got) != 1 || got[0].GetName() != RootCAName {
			t.Fatalf("the remote proxy got %d secrets (%v), want ROOTCA alone", len(got), got)
		}
		if !bytes.Equal(caOf(t, got[0]), f.bundles.Current().PEM) {
			t.Fatal("ROOTCA is not the trust bundle")
		}
	}
	if n := f.reviewCount(); n != reviews {
		t.Fatalf("%d permission checks made in the local cluster for a remote proxy", n-reviews)
	}
	if after := f.refusals("unknown_cluster"); after != before+6 {
		t.Fatalf("unknown_cluster refusals went from %v to %v, want 6 more", before, after)
	}
}

// TestRemoteClustersProxyGetsItsClustersSecrets: a proxy of cluster-b is
// served cluster-b's Secret of its namespace, checked in cluster-b, and
// never the local Secret of that name; a Secret only the local cluster
// has is not found for it; one its account may not get in cluster-b is
// refused. A change in cluster-b is pushed; a replaced client is read
// again; the cluster withdrawn, nothing more is served.
func TestRemoteClustersProxyGetsItsClustersSecrets(t *testing.T) {
	root := catest.NewRoot(t)
	localLeaf, remoteLeaf := leaf(t, root), leaf(t, root)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls", "gw/local-only"}},
		tlsSecret("gw", "tls", localLeaf, nil), tlsSecret("gw", "local-only", localLeaf, nil))
	remote, remoteReviews := sarClient(sarPolicy{gwUser: {"gw/tls"}},
		tlsSecret("gw", "tls", remoteLeaf, root.CertPEM), tlsSecret("gw", "denied", remoteLeaf, nil))
	f.srv.ClusterAdded("cluster-b", remote)
	changes := f.watch(remoteGW, "kubernetes://tls", "kubernetes://local-only", "kubernetes://denied")
	localReviews := f.reviewCount()

	got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls", "kubernetes://tls-cacert"})
	if len(got) != 2 {
		t.Fatalf("the remote proxy got %d secrets, want its cluster's certificate and CA", len(got))
	}
	if !bytes.Equal(certOf(t, got[0]), remoteLeaf.CertPEM) || !bytes.Equal(caOf(t, got[1]), root.CertPEM) {
		t.Fatal("the remote proxy was not served its own cluster's Secret")
	}
	if remoteReviews.Load() == 0 || f.reviewCount() != localReviews {
		t.Fatalf("permission checks: %d in cluster-b, %d in the local cluster; want them in cluster-b only",
			remoteReviews.Load(), f.reviewCount()-localReviews)
	}
	for name, reason := range map[string]string{"kubernetes://local-only": "not_found", "kubernetes://denied": "unauthorized"} {
		before := f.refusals(reason)
		if got := f.srv.Generate(context.Background(), remoteGW, []string{name}); len(got) != 0 {
			t.Fatalf("%s served to the remote proxy", name)
		}
		if f.refusals(reason) != before+1 {
			t.Fatalf("%s not refused as %s", name, reason)
		}
	}

	// Rotated in cluster-b: pushed, with the new bytes.
	next := leaf(t, root)
	if _, err := remote.CoreV1().Secrets("gw").Update(context.Background(), tlsSecret("gw", "tls", next, root.CertPEM), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, changes, "the rotation in cluster-b")
	f.eventually(func() bool {
		got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls"})
		return len(got) == 1 && bytes.Equal(certOf(t, got[0]), next.CertPEM)
	})
	// The local Secret of that name changed: the remote proxy is not told.
	drain(changes)
	if _, err := f.client.CoreV1().Secrets("gw").Update(context.Background(), tlsSecret("gw", "tls", leaf(t, root), nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-f.changes // the local consumer is
	select {
	case <-changes:
		t.Fatal("the remote proxy was told of a local Secret's change")
	case <-time.After(100 * time.Millisecond):
	}

	// The remote secret's kubeconfig changed: the new client is read.
	replaced, _ := sarClient(sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", remoteLeaf, nil))
	f.srv.ClusterAdded("cluster-b", replaced)
	waitFor(t, changes, "the client's replacement")
	f.eventually(func() bool {
		got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls"})
		return len(got) == 1 && bytes.Equal(certOf(t, got[0]), remoteLeaf.CertPEM)
	})

	// Withdrawn: told, and refused.
	f.srv.ClusterRemoved("cluster-b")
	waitFor(t, changes, "the cluster's removal")
	before := f.refusals("unknown_cluster")
	if got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls"}); len(got) != 0 {
		t.Fatal("a withdrawn cluster's Secret was served")
	}
	if f.refusals("unknown_cluster") != before+1 {
		t.Fatal("not refused as unknown_cluster")
	}
	if n := testutil.ToFloat64(f.srv.watched); n != 1 {
		t.Fatalf("bulwark_sds_watched_namespaces = %v after the cluster left, want 1 (the local gw)", n)
	}
}

// TestRemoteReaderWithoutSecretPermissionIsRefusedAtOnce: a remote
// cluster whose reader may not list Secrets, or may not create
// SubjectAccessReviews, refuses its proxy's Secrets with reason
// remote_cluster, without waiting out the listing, and serves them once
// the permission is granted.
func TestRemoteReaderWithoutSecretPermissionIsRefusedAtOnce(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", leaf(t, root), nil))
	remote, _ := sarClient(sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", leaf(t, root), nil))
	forbidden := func(resource string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
		}
	}
	var listAllowed, reviewAllowed atomic.Bool
	remote.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if listAllowed.Load() {
			return false, nil, nil
		}
		return forbidden("secrets")(a)
	})
	remote.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if reviewAllowed.Load() {
			return false, nil, nil
		}
		return forbidden("subjectaccessreviews")(a)
	})
	f.srv.ClusterAdded("cluster-b", remote)
	w := f.srv.Watch(remoteGW, func() {})
	defer w.Close()
	w.Set([]string{"kubernetes://tls"})

	refused := func(what string) {
		t.Helper()
		before := f.refusals("remote_cluster")
		start := time.Now()
		if got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls"}); len(got) != 0 {
			t.Fatalf("%s: served", what)
		}
		if d := time.Since(start); d >= syncWait {
			t.Fatalf("%s: refused after %v, the whole wait for the listing", what, d)
		}
		if f.refusals("remote_cluster") != before+1 {
			t.Fatalf("%s: not refused as remote_cluster", what)
		}
	}
	refused("list forbidden")
	listAllowed.Store(true)
	// The informer retries with a back-off; once listed, the review is
	// what is forbidden.
	f.eventually(func() bool {
		_, _, err := f.srv.lister(context.Background(), nsKey{"cluster-b", "gw"})
		return err == nil
	})
	refused("review forbidden")
	reviewAllowed.Store(true)
	if got := f.srv.Generate(context.Background(), remoteGW, []string{"kubernetes://tls"}); len(got) != 1 {
		t.Fatalf("granted both, the remote proxy got %d secrets, want 1", len(got))
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("not told of %s", what)
	}
}
