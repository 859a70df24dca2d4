package kubesource

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// fakeSource runs a source over fakes, with fast polls, until the test
// ends.
func fakeSource(t *testing.T, kube *fakeKube, istio *istiofake.Clientset) (*Source, *recorder, *logtest.Recorder) {
	t.Helper()
	logs, log := logtest.New(t)
	store := &recorder{Store: model.NewStore()}
	src, err := New(Config{
		Client: kube, Istio: istio, Publisher: store, Logger: log,
		SyncReport: 20 * time.Millisecond, CRDPoll: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src)
	return src, store, logs
}

func denyAll(ns, name string) *istiosecurity.AuthorizationPolicy {
	ap := &istiosecurity.AuthorizationPolicy{ObjectMeta: objectMeta(ns, name, nil)}
	ap.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}
	ap.Spec.Action = securityv1.AuthorizationPolicy_DENY
	ap.Spec.Rules = []*securityv1.Rule{{}}
	return ap
}

func echoPolicies(s *model.Snapshot) int {
	return len(s.AuthorizationPolicies("app", map[string]string{"app": "echo"}))
}

func TestReadyWithoutTheIstioCRDs(t *testing.T) {
	kube := newFakeKube(echoService())
	src, store, logs := fakeSource(t, kube, newFakeIstio())
	eventually(t, "synced", src.HasSynced)
	if store.Current().Service(echoHost) == nil {
		t.Fatal("echo is not in the model")
	}
	calls := kube.disc.called()
	eventually(t, "discovery asked again", func() bool { return kube.disc.called() > calls+4 })
	for _, k := range istioKinds() {
		if n := logs.Count("WARN", "Istio CRD "+k.crd()+" not installed; no "+k.kind+" policies apply until it is"); n != 1 {
			t.Errorf("%s logged missing %d times, want once", k.crd(), n)
		}
	}
}

func TestAServedKindThatCannotBeReadKeepsItUnsynced(t *testing.T) {
	kube := newFakeKube(echoService())
	kube.disc.serveAll()
	istio := newFakeIstio(denyAll("app", "deny"))
	var forbidden atomic.Bool
	forbidden.Store(true)
	forbid(istio, "authorizationpolicies", &forbidden)
	src, store, logs := fakeSource(t, kube, istio)

	eventually(t, "a report of the pending cache", func() bool {
		return logs.Count("WARN", "waiting for Kubernetes caches to sync", "authorizationpolicies") >= 2
	})
	if logs.Count("WARN", "Kubernetes list or watch failed", "authorizationpolicies", "forbidden") == 0 {
		t.Error("the Forbidden list was not logged")
	}
	if src.HasSynced() || len(store.published()) != 0 {
		t.Fatalf("synced %t, published %v, without the AuthorizationPolicies", src.HasSynced(), store.published())
	}

	forbidden.Store(false)
	eventually(t, "synced once readable", src.HasSynced)
	if p := store.published(); len(p) == 0 {
		t.Fatal("synced without publishing")
	}
	if echoPolicies(store.Current()) != 1 {
		t.Error("the first snapshot lacks the DENY policy")
	}
}

func TestAFailingDiscoveryKeepsItUnsynced(t *testing.T) {
	kube := newFakeKube(echoService())
	kube.disc.fail(apierrors.NewInternalError(errors.New("etcd unavailable")))
	istio := newFakeIstio(denyAll("app", "deny"))
	src, store, logs := fakeSource(t, kube, istio)

	eventually(t, "discovery retried", func() bool { return kube.disc.called() >= 3 })
	if src.HasSynced() || len(store.published()) != 0 {
		t.Fatalf("synced %t, published %v, without knowing what is served", src.HasSynced(), store.published())
	}
	if logs.Count("WARN", "Kubernetes discovery failed; retrying", "etcd unavailable") == 0 {
		t.Error("the failure was not logged")
	}
	if logs.Count("not installed") != 0 {
		t.Error("a failed discovery was read as CRDs not installed")
	}

	kube.disc.serveAll()
	kube.disc.fail(nil)
	eventually(t, "synced once discovery answers", src.HasSynced)
	if echoPolicies(store.Current()) != 1 {
		t.Error("the first snapshot lacks the DENY policy")
	}
}

func TestAKindInstalledLaterIsPickedUp(t *testing.T) {
	kube := newFakeKube(echoService())
	istio := newFakeIstio(newDestinationRule("app", "echo", "echo"), denyAll("app", "deny"))
	src, store, logs := fakeSource(t, kube, istio)
	eventually(t, "synced", src.HasSynced)
	if s := store.Current(); s.DestinationRuleFor(echoHost, "app", nil) != nil || echoPolicies(s) != 0 {
		t.Fatal("policies of kinds not served are in the model")
	}

	kube.disc.serve("networking.istio.io/v1", "destinationrules")
	waitFor(t, store.Store, "the DestinationRule", func(s *model.Snapshot) bool {
		return s.DestinationRuleFor(echoHost, "app", nil) != nil
	})
	if echoPolicies(store.Current()) != 0 {
		t.Fatal("AuthorizationPolicies read before they are served")
	}

	kube.disc.serve("security.istio.io/v1", "authorizationpolicies")
	waitFor(t, store.Store, "the DENY policy", func(s *model.Snapshot) bool { return echoPolicies(s) == 1 })
	_, err := istio.SecurityV1().AuthorizationPolicies("app").Create(context.Background(), denyAll("app", "deny-2"), metav1.CreateOptions{})
	check(t, "create policy", err)
	waitFor(t, store.Store, "the second DENY policy", func(s *model.Snapshot) bool { return echoPolicies(s) == 2 })
	for _, crd := range []string{"destinationrules.networking.istio.io", "authorizationpolicies.security.istio.io"} {
		if logs.Count("INFO", "Istio CRD "+crd+" served; watching it") != 1 {
			t.Errorf("picking up %s was not logged once", crd)
		}
	}
}

// stubInformer is an informer whose cache and sync the test sets.
type stubInformer struct {
	cache.SharedIndexInformer
	idx    cache.Indexer
	synced atomic.Bool
}

func (s *stubInformer) HasSynced() bool           { return s.synced.Load() }
func (s *stubInformer) GetIndexer() cache.Indexer { return s.idx }

func TestAStagedCacheIsReadOnlyOnceSynced(t *testing.T) {
	dr := istioKinds()[3]
	if dr.resource != "destinationrules" {
		t.Fatalf("kind %s", dr.resource)
	}
	inf := &informers{named: map[string]cache.SharedIndexInformer{}, staged: map[string]staged{}}
	dr.setLister(&inf.listers, emptyIndexer())
	partial := &stubInformer{idx: emptyIndexer()}
	check(t, "add", partial.idx.Add(newDestinationRule("app", "echo", "echo")))
	inf.staged[dr.resource] = staged{kind: dr, informer: partial}

	if inf.promote() || len(list(inf.listers.destRules.List)) != 0 {
		t.Fatal("an unsynced cache was read")
	}
	if got := inf.unsynced(); len(got) != 1 || got[0] != "destinationrules" {
		t.Errorf("unsynced %v", got)
	}
	partial.synced.Store(true)
	if !inf.promote() {
		t.Fatal("a synced cache was not promoted")
	}
	if got, _ := inf.listers.destRules.List(labels.Everything()); len(got) != 1 {
		t.Errorf("promoted lister holds %d rules", len(got))
	}
	if len(inf.staged) != 0 || inf.named["destinationrules"] != partial {
		t.Errorf("staged %v, named %v", inf.staged, inf.named)
	}
}
