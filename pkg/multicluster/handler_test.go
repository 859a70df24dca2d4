package multicluster

import (
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// events records what a ClusterHandler is told.
type events struct {
	mu      sync.Mutex
	got     []string
	clients []kubernetes.Interface
}

func (e *events) ClusterAdded(id string, c kubernetes.Interface) {
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	e.add("added " + id)
}
func (e *events) ClusterRemoved(id string) { e.add("removed " + id) }

func (e *events) add(s string) {
	e.mu.Lock()
	e.got = append(e.got, s)
	e.mu.Unlock()
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func TestHandlersAreToldOfClustersAddedReplacedAndRemoved(t *testing.T) {
	h := start(t, nil)
	b := newRecorder(t, false)
	h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": b.kubeconfig("token-1")}))
	h.eventually("b registered", func() bool { _, ok := h.c.Client("b"); return ok })
	var ev events
	h.c.Notify(&ev) // after b: told of it at once
	if got := ev.list(); !slices.Equal(got, []string{"added b"}) {
		t.Fatalf("events %v, want b added", got)
	}
	h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": b.kubeconfig("token-2")}))
	h.eventually("b's client replaced", func() bool { return len(ev.list()) == 2 })
	h.apply(secret("istio-remote-secret-c", map[string][]byte{"c": b.kubeconfig("token-c"), "local": b.kubeconfig("x")}))
	h.eventually("c registered", func() bool { return len(ev.list()) == 3 })
	h.delete("istio-remote-secret-b")
	h.eventually("b withdrawn", func() bool { return len(ev.list()) == 4 })
	if got, want := ev.list(), []string{"added b", "added b", "added c", "removed b"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	c, _ := h.c.Client("c")
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if timeout(ev.clients[2]) != 0 || timeout(c) == 0 {
		t.Errorf("informers' client timeout %v, requests' %v: want none and one", timeout(ev.clients[2]), timeout(c))
	}
}

// timeout is the overall request timeout of a client-go clientset.
func timeout(c kubernetes.Interface) time.Duration {
	return c.(*kubernetes.Clientset).CoreV1().RESTClient().(*rest.RESTClient).Client.Timeout
}
