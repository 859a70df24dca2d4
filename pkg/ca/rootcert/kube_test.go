package rootcert_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// The requirement: a new namespace has its ConfigMap within this time.
const newNamespaceBudget = 2 * time.Second

// mesh is one test's world on the shared API server: a label that selects
// its namespaces (so that parallel tests' controllers do not meet), the
// namespace its controllers' Lease lives in, and a running CA.
type mesh struct {
	t        *testing.T
	env      *testenv.Env
	client   kubernetes.Interface
	label    string
	leaseNS  string
	ca       *ca.CA
	cacerts  string
	stopCA   context.CancelFunc
	caExited chan struct{}
}

func newMesh(t *testing.T) *mesh {
	t.Helper()
	env := testenv.Get(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	m := &mesh{
		t: t, env: env, client: env.Client(t), label: hex.EncodeToString(b),
		leaseNS: env.Namespace(t), cacerts: filepath.Join(t.TempDir(), "cacerts"),
		caExited: make(chan struct{}),
	}
	authority, err := ca.New(ca.Config{
		TrustDomain:    spiffeid.RequireTrustDomainFromString("cluster.local"),
		Store:          ca.NewDirStore(t.TempDir()),
		CACertsDir:     m.cacerts,
		ReloadDebounce: 20 * time.Millisecond,
		Logger:         catest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.ca = authority
	ctx, cancel := context.WithCancel(context.Background())
	m.stopCA = cancel
	go func() { defer close(m.caExited); _ = authority.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-m.caExited })
	return m
}

// namespace creates a namespace the mesh's controllers select, and returns
// its name and when the API server answered.
func (m *mesh) namespace() (string, time.Time) {
	m.t.Helper()
	ns, err := m.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "rootcert-", Labels: map[string]string{"rootcert-test": m.label}},
	}, metav1.CreateOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	created := time.Now()
	m.t.Cleanup(func() {
		_ = m.client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name, created
}

// writes records the ConfigMap writes one controller sends.
type writes struct {
	mu         sync.Mutex
	namespaces []string
}

func (w *writes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/configmaps") {
			w.mu.Lock()
			w.namespaces = append(w.namespaces, namespaceOf(req.URL.Path))
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.namespaces)
}

func (w *writes) in(ns string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, x := range w.namespaces {
		if x == ns {
			n++
		}
	}
	return n
}

// namespaceOf reads the namespace of an API path /api/v1/namespaces/<ns>/...
func namespaceOf(path string) string {
	parts := strings.Split(path, "/")
	if i := slices.Index(parts, "namespaces"); i >= 0 && i+1 < len(parts) {
		return parts[i+1]
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// controller starts a controller with its own client, and returns it, its
// writes, and a function that stops it and waits for Run to return.
func (m *mesh) controller(name string, change ...func(*rootcert.Config)) (*rootcert.Controller, *writes, func()) {
	m.t.Helper()
	w := &writes{}
	cfg := rest.CopyConfig(m.env.Config)
	cfg.WrapTransport = w.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	cc := rootcert.Config{
		Client:            client,
		Namespace:         m.leaseNS,
		Identity:          name,
		Bundles:           m.ca,
		NamespaceSelector: "rootcert-test=" + m.label,
		LeaseDuration:     4 * time.Second,
		RenewDeadline:     3 * time.Second,
		RetryPeriod:       500 * time.Millisecond,
		Logger:            catest.Logger(m.t).With("controller", name),
	}
	for _, f := range change {
		f(&cc)
	}
	c, err := rootcert.New(cc)
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			m.t.Errorf("%s: Run: %v", name, err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				m.t.Errorf("%s: Run did not return 15s after cancel", name)
			}
		})
	}
	m.t.Cleanup(stop)
	return c, w, stop
}

// waitConfigMap polls until ns's ConfigMap holds the CA's current bundle,
// and returns how long that took from since.
func (m *mesh) waitConfigMap(ns string, since time.Time) time.Duration {
	m.t.Helper()
	want := string(m.ca.Current().PEM)
	deadline := time.Now().Add(15 * time.Second)
	for {
		cm, err := m.client.CoreV1().ConfigMaps(ns).Get(context.Background(), rootcert.ConfigMapName, metav1.GetOptions{})
		if err == nil && cm.Data[rootcert.DataKey] == want && cm.Labels[rootcert.ConfigLabel] == "true" {
			return time.Since(since)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			m.t.Fatalf("get configmap in %s: %v", ns, err)
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("configmap in %s does not hold the current bundle after 15s", ns)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func TestANewNamespaceGetsTheConfigMapWithinTwoSeconds(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	existing, _ := m.namespace()
	c, _, _ := m.controller("istiod-a")
	waitFor(t, "leadership and synced caches", func() bool { return c.IsLeader() && c.HasSynced() })
	m.waitConfigMap(existing, time.Now())

	var latencies []time.Duration
	for range 5 {
		ns, created := m.namespace()
		latencies = append(latencies, m.waitConfigMap(ns, created))
	}
	slices.Sort(latencies)
	t.Logf("namespace created → configmap readable: min %v, median %v, max %v (5 namespaces)",
		latencies[0].Round(time.Millisecond), latencies[2].Round(time.Millisecond), latencies[4].Round(time.Millisecond))
	if latencies[4] > newNamespaceBudget {
		t.Errorf("slowest namespace got its configmap after %v; want within %v", latencies[4], newNamespaceBudget)
	}
}

func TestDeletedAndEditedConfigMapsAreRepaired(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	ns, created := m.namespace()
	m.controller("istiod-a")
	m.waitConfigMap(ns, created)
	cms := m.client.CoreV1().ConfigMaps(ns)

	if err := cms.Delete(context.Background(), rootcert.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted configmap recreated after %v", m.waitConfigMap(ns, time.Now()).Round(time.Millisecond))

	cm, err := cms.Get(context.Background(), rootcert.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[rootcert.DataKey] = string(catest.NewRoot(t).CertPEM) // an attacker's root
	delete(cm.Labels, rootcert.ConfigLabel)
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("edited configmap repaired after %v", m.waitConfigMap(ns, time.Now()).Round(time.Millisecond))
}

func TestABundleChangeUpdatesEveryNamespace(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	var names []string
	for range 3 {
		ns, _ := m.namespace()
		names = append(names, ns)
	}
	ctrl, _, _ := m.controller("istiod-a")
	for _, ns := range names {
		m.waitConfigMap(ns, time.Now())
	}
	before := m.ca.Current()

	set := catest.CACerts{Roots: []*catest.Cert{catest.NewRoot(t)}}
	if lacking := ctrl.NamespacesWithoutRoot(set.Roots[0].Cert); !containsAll(lacking, names) {
		t.Fatalf("namespaces without the new root %v, want %v among them", lacking, names)
	}
	set.Signing = catest.NewIntermediate(t, set.Roots[0])
	changed := time.Now()
	catest.WriteCACerts(t, m.cacerts, set)
	waitFor(t, "the CA to load the plugged-in set", func() bool { return m.ca.Current().Version > before.Version })
	if !m.ca.Current().Roots[0].Equal(set.Roots[0].Cert) {
		t.Fatal("the CA's bundle is not the plugged-in root")
	}
	var slowest time.Duration
	for _, ns := range names {
		slowest = max(slowest, m.waitConfigMap(ns, changed))
	}
	t.Logf("cacerts written → every configmap holds the new root: %v", slowest.Round(time.Millisecond))
	waitFor(t, "the caches to see every namespace holding the new root", func() bool {
		return !slices.ContainsFunc(ctrl.NamespacesWithoutRoot(set.Roots[0].Cert), func(ns string) bool { return slices.Contains(names, ns) })
	})
}

func containsAll(list, want []string) bool {
	for _, w := range want {
		if !slices.Contains(list, w) {
			return false
		}
	}
	return true
}

func TestATerminatingNamespaceIsLeftAlone(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	ns, created := m.namespace()
	// One worker checks namespaces in the order their events came.
	rec, log := logtest.New(t)
	c, w, _ := m.controller("istiod-a", func(cfg *rootcert.Config) { cfg.Workers, cfg.Logger = 1, log })
	m.waitConfigMap(ns, created)
	// No namespace controller runs, so the namespace stays Terminating
	// with its ConfigMap, which is then deleted by hand.
	if err := m.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the controller to see the namespace terminating", func() bool {
		n, err := m.client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		return err == nil && n.DeletionTimestamp != nil
	})
	before := w.in(ns)
	if err := m.client.CoreV1().ConfigMaps(ns).Delete(context.Background(), rootcert.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap event after the deletion's, in a namespace the
	// controller does not serve: its check comes after that of ns.
	canary := m.env.Namespace(t)
	if _, err := m.client.CoreV1().ConfigMaps(canary).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: rootcert.ConfigMapName},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the controller to check the canary", func() bool { return rec.Count(rootcert.LogChecked, "namespace="+canary) > 0 })
	if n := w.in(ns) - before; n != 0 {
		t.Errorf("%d configmap writes into a terminating namespace; want none", n)
	}
	if n := rec.Count(rootcert.LogChecked, "namespace="+ns, "retry=true"); n != 0 {
		t.Errorf("%d checks of a terminating namespace retried; want none", n)
	}
	// A new namespace proves the controller still works.
	other, created := m.namespace()
	m.waitConfigMap(other, created)
	if !c.IsLeader() {
		t.Error("the controller stopped leading")
	}
}
