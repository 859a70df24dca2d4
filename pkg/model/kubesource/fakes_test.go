package kubesource

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeKube is a fake clientset whose discovery serves what the test says,
// safely changed while a source runs.
type fakeKube struct {
	*fake.Clientset
	disc *fakeDiscovery
}

var _ kubernetes.Interface = (*fakeKube)(nil)

func newFakeKube(objs ...runtime.Object) *fakeKube {
	c := fake.NewClientset(objs...)
	return &fakeKube{Clientset: c, disc: &fakeDiscovery{
		FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &c.Fake},
		served:        map[string][]string{},
	}}
}

func (f *fakeKube) Discovery() discovery.DiscoveryInterface { return f.disc }

// fakeDiscovery answers ServerResourcesForGroupVersion from served, or
// fails with err.
type fakeDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu     sync.Mutex
	served map[string][]string // group version → resources
	err    error
	calls  int
}

// serve makes discovery serve resources of gv, as when their CRDs are
// installed.
func (d *fakeDiscovery) serve(gv string, resources ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.served[gv] = append(d.served[gv], resources...)
}

func (d *fakeDiscovery) serveAll() {
	for _, k := range istioKinds() {
		d.serve(k.groupVersion, k.resource)
	}
}

func (d *fakeDiscovery) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *fakeDiscovery) called() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func (d *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.err != nil {
		return nil, d.err
	}
	names, ok := d.served[gv]
	if !ok {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("the server could not find the requested resource, GroupVersion %q not found", gv),
		}}
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: n, Namespaced: true})
	}
	return list, nil
}

// newFakeIstio is Istio's fake clientset. Its watch does not implement
// watch-list (client-go's informers ask for it first), so it refuses the
// request and the informers fall back to list and watch.
func newFakeIstio(objs ...runtime.Object) *istiofake.Clientset {
	c := istiofake.NewSimpleClientset(objs...)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, ok := a.(interface{ GetListOptions() metav1.ListOptions })
		if ok && w.GetListOptions().SendInitialEvents != nil && *w.GetListOptions().SendInitialEvents {
			return true, nil, apierrors.NewBadRequest("watch-list is not supported")
		}
		return false, nil, nil
	})
	return c
}

// forbid makes listing resource of c fail with Forbidden while on is set.
func forbid(c *istiofake.Clientset, resource string, on *atomic.Bool) {
	c.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if !on.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", fmt.Errorf("RBAC: no list"))
	})
}

// eventually waits until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}
