package sds

import (
	"bytes"
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// remoteGW is gwProxy's namesake in a remote cluster: the same namespace
// and service account, authenticated by cluster-b.
var remoteGW = Proxy{Namespace: "gw", ServiceAccount: "ingress", Secure: true, Cluster: "cluster-b"}

// TestRemoteProxyGetsTheTrustBundleAndNoLocalSecret: a proxy of a remote
// cluster whose namesake of the local cluster may read a Secret gets the
// trust bundle, and never that Secret: no permission check is made for it
// in the local cluster, and each refusal is counted.
func TestRemoteProxyGetsTheTrustBundleAndNoLocalSecret(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", leaf(t, root), root.CertPEM))
	if got := f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"}); len(got) != 1 {
		t.Fatalf("the local proxy got %d secrets, want 1", len(got))
	}
	reviews := f.reviewCount()
	before := testutil.ToFloat64(f.srv.refused.WithLabelValues("remote_cluster"))
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
	if after := testutil.ToFloat64(f.srv.refused.WithLabelValues("remote_cluster")); after != before+6 {
		t.Fatalf("remote_cluster refusals went from %v to %v, want 6 more", before, after)
	}
}
