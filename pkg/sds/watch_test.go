package sds

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// secretNamespacesRead returns the namespaces whose Secrets were listed or
// watched, "" for all of them.
func (f *fixture) secretNamespacesRead() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "secrets" && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
			out = append(out, a.GetNamespace())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (f *fixture) consumersIn(ns string) int {
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	if n := f.srv.namespaces[nsKey{"", ns}]; n != nil {
		return n.consumers
	}
	return 0
}

func TestOnlyNamespacesWithConsumersAreWatched(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, sarPolicy{"system:serviceaccount:c:gw": {"c/tls"}},
		tlsSecret("gw", "tls", leaf(t, root), nil), tlsSecret("c", "tls", leaf(t, root), nil),
		tlsSecret("plain", "tls", leaf(t, root), nil), tlsSecret("b", "tls", leaf(t, root), nil))

	// None of these can be served a Secret, so none makes a namespace watched.
	for p, names := range map[Proxy][]string{
		{Namespace: "plain", ServiceAccount: "gw"}:           {"kubernetes://tls"},
		{Namespace: "a", ServiceAccount: "gw", Secure: true}: {"kubernetes://b/tls", "default", RootCAName},
		// A proxy of a remote cluster not registered: nothing to read.
		{Namespace: "b", ServiceAccount: "gw", Secure: true, Cluster: "cluster-b"}: {"kubernetes://tls", RootCAName},
	} {
		w := f.srv.Watch(p, func() {})
		w.Set(names)
		defer w.Close()
	}
	c := Proxy{Namespace: "c", ServiceAccount: "gw", Secure: true}
	first, second := f.srv.Watch(c, func() {}), f.srv.Watch(c, func() {})
	first.Set([]string{"kubernetes://tls"})
	second.Set([]string{"kubernetes://tls-cacert"})
	if got := f.srv.Generate(context.Background(), c, []string{"kubernetes://tls"}); len(got) != 1 {
		t.Fatalf("the consumer in c got %d secrets, want 1", len(got))
	}
	if got, want := f.secretNamespacesRead(), []string{"c", "gw"}; !slices.Equal(got, want) {
		t.Fatalf("Secrets read in namespaces %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(f.srv.watched); n != 2 {
		t.Fatalf("bulwark_sds_watched_namespaces = %v, want 2", n)
	}

	first.Set([]string{"kubernetes://other"}) // other names, still a consumer of c
	first.Close()
	if n := f.consumersIn("c"); n != 1 {
		t.Fatalf("%d consumers in c after one left, want 1", n)
	}
	second.Set(nil)
	if n := f.consumersIn("c"); n != 0 {
		t.Fatalf("%d consumers in c after both left, want 0", n)
	}
	if got := f.srv.Generate(context.Background(), c, []string{"kubernetes://tls"}); len(got) != 0 {
		t.Fatal("a Secret of a namespace no longer watched was served")
	}
	if n := testutil.ToFloat64(f.srv.watched); n != 1 {
		t.Fatalf("bulwark_sds_watched_namespaces = %v after c's consumers left, want 1", n)
	}
}

func TestWatchToldOnlyOfItsSecrets(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, nil, tlsSecret("gw", "other", leaf(t, root), nil), tlsSecret("gw", "unrelated", leaf(t, root), nil))
	other := f.watch(Proxy{Namespace: "gw", ServiceAccount: "canary", Secure: true}, "kubernetes://other")
	ctx := context.Background()
	update := func(name string, mod func(*metav1.ObjectMeta)) {
		t.Helper()
		s := tlsSecret("gw", name, leaf(t, root), nil)
		if mod != nil {
			cur, err := f.client.CoreV1().Secrets("gw").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s = cur.DeepCopy()
			mod(&s.ObjectMeta)
		}
		if _, err := f.client.CoreV1().Secrets("gw").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The events of a namespace are handled in order: other's
	// notification comes after those of the updates before it.
	update("unrelated", nil)
	update("other", nil)
	<-other
	select {
	case <-f.changes:
		t.Fatal("the consumer of tls was told of a change of another Secret")
	default:
	}

	if _, err := f.client.CoreV1().Secrets("gw").Create(ctx, tlsSecret("gw", "tls", leaf(t, root), nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-f.changes
	update("tls", func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"touched": "yes"} })
	update("other", nil)
	<-other
	select {
	case <-f.changes:
		t.Fatal("the consumer of tls was told of a change of its labels only")
	default:
	}
}
