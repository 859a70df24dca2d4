package multicluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

const testNS = "istio-system"

// recorder is a TLS API server that answers /version and keeps every
// request it receives, headers and body.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
	hang bool
	// garbage: answer every request with bytes that are no API response.
	garbage bool
}

func newRecorder(t *testing.T, hang bool) *recorder {
	return startRecorder(t, &recorder{hang: hang})
}

func startRecorder(t *testing.T, r *recorder) *recorder {
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		var b bytes.Buffer
		_ = req.Header.Write(&b)
		r.mu.Lock()
		r.seen = append(r.seen, req.URL.String()+"\n"+b.String()+"\n"+string(body))
		r.mu.Unlock()
		if r.hang {
			<-req.Context().Done()
			return
		}
		if r.garbage {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(bytes.Repeat([]byte{0xff, '{', 0}, 4096))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"35","gitVersion":"v1.35.0"}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// kubeconfig returns a kubeconfig for r with a bearer token.
func (r *recorder) kubeconfig(token string) []byte {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	return []byte(kubeconfig(r.srv.URL,
		map[string]string{"certificate-authority-data": base64.StdEncoding.EncodeToString(ca)},
		map[string]string{"token": token}))
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

type harness struct {
	t    *testing.T
	kube *fake.Clientset
	c    *Controller
	reg  *prometheus.Registry
	logs *logtest.Recorder
}

func start(t *testing.T, tweak func(*Config), existing ...*corev1.Secret) *harness {
	t.Helper()
	logs, log := logtest.New(t)
	objs := make([]runtime.Object, len(existing))
	for i, s := range existing {
		objs[i] = s
	}
	h := &harness{t: t, kube: fake.NewClientset(objs...), reg: prometheus.NewRegistry(), logs: logs}
	cfg := Config{Client: h.kube, Namespace: testNS, LocalClusterID: "local", Logger: log, Registerer: h.reg, SyncTimeout: 20 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// The fake clientset's watch does not resume from the list's version:
	// objects created between the list and the watch would be missed.
	h.eventually("secrets listed", c.HasSynced)
	return h
}

// secret is a remote secret as istioctl create-remote-secret writes it.
func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS,
			Labels:      map[string]string{SecretLabel: "true"},
			Annotations: map[string]string{ClusterAnnotation: name}},
		Data: data,
	}
}

func (h *harness) apply(s *corev1.Secret) {
	h.t.Helper()
	ctx := context.Background()
	if _, err := h.kube.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{}); err == nil {
		_, err = h.kube.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		return
	}
	if _, err := h.kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := h.kube.CoreV1().Secrets(testNS).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// eventually polls cond for up to 30 seconds (the machine may be loaded).
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting: %s; clusters %+v", what, h.c.Clusters())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) status(id string) string {
	for _, c := range h.c.Clusters() {
		if c.ID == id {
			return c.SyncStatus
		}
	}
	return ""
}

func TestRemoteSecretsRegisterSwapAndWithdrawClusters(t *testing.T) {
	h := start(t, nil)
	b := newRecorder(t, false)
	h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": b.kubeconfig("token-1"), "local": b.kubeconfig("x")}))
	h.eventually("b synced", func() bool { return h.status("b") == StatusSynced })
	if _, ok := h.c.Client("local"); ok {
		t.Fatal("istiod's own cluster ID was registered as remote")
	}
	if n := len(h.c.Clusters()); n != 1 {
		t.Fatalf("clusters = %+v, want b only", h.c.Clusters())
	}
	if !strings.Contains(strings.Join(b.requests(), ""), "Bearer token-1") {
		t.Fatalf("remote got no request with the kubeconfig's token: %q", b.requests())
	}

	t.Run("a second secret claiming b is refused with a clear log", func(t *testing.T) {
		evil := newRecorder(t, false)
		h.apply(secret("takeover", map[string][]byte{"b": evil.kubeconfig("evil")}))
		h.eventually("refusal logged", func() bool {
			return h.logs.Count("cluster ID already registered by another secret") > 0
		})
		if got := h.c.Clusters()[0].SecretName; got != testNS+"/istio-remote-secret-b" {
			t.Fatalf("b is now owned by %s", got)
		}
		h.delete("takeover")
	})

	t.Run("a changed kubeconfig swaps the client with no gap", func(t *testing.T) {
		old, _ := h.c.Client("b")
		stop := make(chan struct{})
		gaps := make(chan string, 1)
		go func() {
			for {
				select {
				case <-stop:
					close(gaps)
					return
				default:
				}
				if _, ok := h.c.Client("b"); !ok {
					gaps <- "b missing during the swap"
					close(gaps)
					return
				}
			}
		}()
		h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": b.kubeconfig("token-2")}))
		h.eventually("client replaced", func() bool { c, _ := h.c.Client("b"); return c != old })
		close(stop)
		if g, ok := <-gaps; ok {
			t.Fatal(g)
		}
		h.eventually("new token used", func() bool { return strings.Contains(strings.Join(b.requests(), ""), "Bearer token-2") })
	})

	t.Run("a refused edit keeps the working cluster", func(t *testing.T) {
		before, _ := h.c.Client("b")
		h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": []byte(kubeconfig(b.srv.URL, nil, map[string]string{"tokenFile": "/etc/passwd"}))}))
		h.eventually("refusal logged", func() bool { return h.logs.Count("remote secret refused", "tokenFile") > 0 })
		if after, ok := h.c.Client("b"); !ok || after != before {
			t.Fatal("a refused kubeconfig changed or removed the cluster")
		}
	})

	t.Run("a deleted secret withdraws the cluster", func(t *testing.T) {
		h.delete("istio-remote-secret-b")
		h.eventually("b withdrawn", func() bool { _, ok := h.c.Client("b"); return !ok })
		if got := testutil.ToFloat64(h.c.metrics.clusters.WithLabelValues("remote")); got != 0 {
			t.Fatalf("istiod_managed_clusters{remote} = %v", got)
		}
	})
}

func TestSecretsOutsideTheNamespaceOrUnlabelledAreIgnored(t *testing.T) {
	h := start(t, nil)
	r := newRecorder(t, false)
	other := secret("elsewhere", map[string][]byte{"x": r.kubeconfig("t")})
	other.Namespace = "default"
	h.apply(other)
	unlabelled := secret("unlabelled", map[string][]byte{"y": r.kubeconfig("t")})
	unlabelled.Labels = nil
	h.apply(unlabelled)
	h.apply(secret("marker", map[string][]byte{"z": r.kubeconfig("t")}))
	h.eventually("z registered", func() bool { _, ok := h.c.Client("z"); return ok })
	if got := h.c.Clusters(); len(got) != 1 {
		t.Fatalf("clusters = %+v, want z only", got)
	}
}

// A kubeconfig that names a file and points at a server the attacker
// reads: the server must never see the file, nor any request at all.
func TestKubeconfigNamingFilesNeverSendsThemToItsServer(t *testing.T) {
	h := start(t, nil)
	r := newRecorder(t, false)
	dir := t.TempDir()
	const content = "SECRET-FILE-CONTENT-4b1d"
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}))
	bad := map[string][]byte{
		"tokenfile":    []byte(kubeconfig(r.srv.URL, map[string]string{"certificate-authority-data": ca}, map[string]string{"tokenFile": file})),
		"clientkey":    []byte(kubeconfig(r.srv.URL, map[string]string{"certificate-authority-data": ca}, map[string]string{"client-key": file, "client-certificate": file})),
		"exec":         []byte(kubeconfig(r.srv.URL, map[string]string{"certificate-authority-data": ca}, map[string]string{"exec": "{apiVersion: client.authentication.k8s.io/v1, command: cat, args: [" + file + "]}"})),
		"authprovider": []byte(kubeconfig(r.srv.URL, map[string]string{"certificate-authority-data": ca}, map[string]string{"auth-provider": "{name: oidc, config: {id-token: x, idp-certificate-authority: " + file + "}}"})),
	}
	h.apply(secret("hostile", bad))
	good := newRecorder(t, false)
	h.apply(secret("fine", map[string][]byte{"fine": good.kubeconfig("t")}))
	h.eventually("the good cluster syncs", func() bool { return h.status("fine") == StatusSynced })
	h.eventually("four refusals", func() bool { return h.logs.Count("remote secret refused") >= 4 })
	if got := h.c.Clusters(); len(got) != 1 {
		t.Fatalf("clusters = %+v, want only fine", got)
	}
	for _, req := range r.requests() {
		if strings.Contains(req, content) {
			t.Fatalf("the server received the file: %q", req)
		}
	}
	if n := len(r.requests()); n != 0 {
		t.Fatalf("the hostile server got %d requests", n)
	}
}

func TestHangingRemoteTimesOutAndOthersSync(t *testing.T) {
	h := start(t, func(c *Config) { c.SyncTimeout = 300 * time.Millisecond })
	hang := newRecorder(t, true)
	garbage := startRecorder(t, &recorder{garbage: true})
	ok := newRecorder(t, false)
	h.apply(secret("hang", map[string][]byte{"hang": hang.kubeconfig("t")}))
	h.apply(secret("garbage", map[string][]byte{"garbage": garbage.kubeconfig("t")}))
	h.apply(secret("ok", map[string][]byte{"ok": ok.kubeconfig("t")}))
	h.eventually("hang and garbage time out, ok syncs", func() bool {
		return h.status("hang") == StatusTimeout && h.status("garbage") == StatusTimeout && h.status("ok") == StatusSynced
	})
	if got := testutil.ToFloat64(h.c.metrics.timeouts); got != 2 {
		t.Fatalf("remote_cluster_sync_timeouts_total = %v", got)
	}
	if _, ok := h.c.Client("hang"); !ok {
		t.Fatal("a slow remote is withdrawn; it must stay registered, its reviews fail as unavailable")
	}
}

func TestFiftyRemoteSecretsAtOnce(t *testing.T) {
	h := start(t, nil)
	r := newRecorder(t, false)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%02d", i)
			s := secret("istio-remote-secret-"+id, map[string][]byte{id: r.kubeconfig("t-" + id)})
			if _, err := h.kube.CoreV1().Secrets(testNS).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	h.eventually("50 clusters synced", func() bool {
		cs := h.c.Clusters()
		for _, c := range cs {
			if c.SyncStatus != StatusSynced {
				return false
			}
		}
		return len(cs) == 50
	})
	if got := testutil.ToFloat64(h.c.metrics.clusters.WithLabelValues("remote")); got != 50 {
		t.Fatalf("istiod_managed_clusters{remote} = %v", got)
	}
}

func TestClustersBeyondTheLimitAreRefused(t *testing.T) {
	h := start(t, func(c *Config) { c.MaxClusters = 3 })
	r := newRecorder(t, false)
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		h.apply(secret("s"+id, map[string][]byte{id: r.kubeconfig("t")}))
	}
	h.eventually("two refusals", func() bool { return h.logs.Count("too many remote clusters") >= 2 })
	if got := len(h.c.Clusters()); got != 3 {
		t.Fatalf("%d clusters registered, limit 3", got)
	}
}

func TestClusterzListsClustersAsIstioDoes(t *testing.T) {
	h := start(t, nil)
	r := newRecorder(t, false)
	h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": r.kubeconfig("t")}))
	h.eventually("b synced", func() bool { return h.status("b") == StatusSynced })
	rec := httptest.NewRecorder()
	h.c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/clusterz", nil))
	want := `[
  {
    "id": "b",
    "secretName": "istio-system/istio-remote-secret-b",
    "syncStatus": "synced"
  }
]
`
	if rec.Body.String() != want {
		t.Fatalf("clusterz = %s, want %s", rec.Body.String(), want)
	}
	if strings.Contains(rec.Body.String(), r.srv.URL) {
		t.Fatal("clusterz shows the server")
	}
	n, err := testutil.GatherAndCount(h.reg, "istiod_remote_cluster_sync_status", "remote_cluster_secret_events_total", "istiod_managed_clusters")
	if err != nil || n == 0 {
		t.Fatalf("metrics: %d, %v", n, err)
	}
}

// TestReadinessWaitsForStartupClusters: istiod is ready, as far as remote
// clusters go, once the remote secrets present at startup are processed
// and each cluster is in the model or has had SyncTimeout, as Istio's
// PILOT_REMOTE_CLUSTER_TIMEOUT.
func TestReadinessWaitsForStartupClusters(t *testing.T) {
	inModel := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	t.Run("secrets present at startup are processed first", func(t *testing.T) {
		ok := newRecorder(t, false)
		// The startup secret's cluster is held while its client is built.
		release := make(chan struct{})
		h := start(t, func(c *Config) {
			c.NewClient = func(rc *rest.Config) (kubernetes.Interface, error) {
				<-release
				return kubernetes.NewForConfig(rc)
			}
		}, secret("b", map[string][]byte{"b": ok.kubeconfig("t")}))
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		ready := make(chan bool, 1)
		go func() { ready <- h.c.StartupSynced(inModel("b")) }()
		select {
		case r := <-ready:
			if r {
				t.Error("ready before the remote secret present at startup registered its cluster")
			}
		case <-time.After(10 * time.Second):
			t.Error("StartupSynced waits for the secret being processed")
		}
		close(release)
		h.eventually("ready", func() bool { return h.c.StartupSynced(inModel("b")) })
		if _, registered := h.c.Client("b"); !registered {
			t.Error("ready without b registered")
		}
	})
	t.Run("a cluster not yet in the model holds readiness until its timeout", func(t *testing.T) {
		const timeout = 2 * time.Second
		hang := newRecorder(t, true)
		h := start(t, func(c *Config) { c.SyncTimeout = timeout }, secret("b", map[string][]byte{"b": hang.kubeconfig("t")}))
		h.eventually("b registered", func() bool { _, ok := h.c.Client("b"); return ok })
		registered := time.Now()
		if h.c.StartupSynced(inModel()) {
			t.Fatal("ready with b neither in the model nor timed out")
		}
		if !h.c.StartupSynced(inModel("b")) {
			t.Error("not ready with b in the model")
		}
		h.eventually("ready once b's time is over", func() bool { return h.c.StartupSynced(inModel()) })
		if waited := time.Since(registered); waited < timeout-100*time.Millisecond {
			t.Errorf("ready %v after b registered, before its timeout %v", waited, timeout)
		}
	})
	t.Run("no limit", func(t *testing.T) {
		hang, ok := newRecorder(t, true), newRecorder(t, false)
		h := start(t, func(c *Config) { c.SyncTimeout = -1 }, secret("b", map[string][]byte{"b": hang.kubeconfig("t")}))
		h.eventually("b registered", func() bool { _, ok := h.c.Client("b"); return ok })
		// A cluster registered after b answers: b's limit, had it one,
		// would have passed by then.
		h.apply(secret("c", map[string][]byte{"c": ok.kubeconfig("t")}))
		h.eventually("c synced", func() bool { return h.status("c") == StatusSynced })
		if h.c.StartupSynced(inModel("c")) || h.status("b") != StatusSyncing {
			t.Errorf("without a limit: ready %t, status %s; want not ready, syncing", h.c.StartupSynced(inModel()), h.status("b"))
		}
		if !h.c.StartupSynced(inModel("b", "c")) {
			t.Error("not ready with b and c in the model")
		}
	})
	t.Run("without a model, the API server's answer", func(t *testing.T) {
		ok := newRecorder(t, false)
		h := start(t, nil, secret("b", map[string][]byte{"b": ok.kubeconfig("t")}))
		h.eventually("ready once b answers", func() bool { return h.c.StartupSynced(nil) })
		if got := h.status("b"); got != StatusSynced {
			t.Errorf("ready with b %s", got)
		}
	})
}

// TestARemoteSecretNamingAnAliasIsRefused: a remote secret key equal to a
// cluster alias is refused, with a log naming the cluster it stands for;
// the secret's other clusters are registered.
func TestARemoteSecretNamingAnAliasIsRefused(t *testing.T) {
	h := start(t, func(c *Config) { c.Aliases = map[string]string{"old-b": "b"} })
	b := newRecorder(t, false)
	h.apply(secret("istio-remote-secret-b", map[string][]byte{"b": b.kubeconfig("token-1"), "old-b": b.kubeconfig("token-2")}))
	h.eventually("b synced", func() bool { return h.status("b") == StatusSynced })
	h.eventually("refusal logged", func() bool { return h.logs.Count("its cluster ID is an alias") > 0 })
	if _, ok := h.c.Client("old-b"); ok {
		t.Fatal("an alias was registered as a remote cluster")
	}
}
