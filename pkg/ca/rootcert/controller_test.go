package rootcert

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func getConfigMap(client *fake.Clientset, ns string) (*corev1.ConfigMap, error) {
	return client.CoreV1().ConfigMaps(ns).Get(context.Background(), ConfigMapName, metav1.GetOptions{})
}

// holds reports whether ns has the ConfigMap with exactly pem.
func holds(client *fake.Clientset, ns, pem string) func() bool {
	return func() bool {
		cm, err := getConfigMap(client, ns)
		return err == nil && cm.Data[DataKey] == pem && cm.Labels[ConfigLabel] == "true"
	}
}

func countWrites(client *fake.Clientset, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == resource && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

func TestEveryNamespaceButTheExcludedGetsTheConfigMap(t *testing.T) {
	client := fake.NewClientset(namespace("default"), namespace("istio-system"), namespace("app"),
		namespace("kube-system"), namespace("kube-public"), namespace("kube-node-lease"))
	c, _ := start(t, client, newBundles("root-1"))
	for _, ns := range []string{"default", "istio-system", "app"} {
		eventually(t, "configmap in "+ns, holds(client, ns, "root-1"))
	}
	if !c.HasSynced() || !c.IsLeader() {
		t.Errorf("HasSynced %t, IsLeader %t; want both", c.HasSynced(), c.IsLeader())
	}
	for _, ns := range DefaultExcludedNamespaces {
		if _, err := getConfigMap(client, ns); !apierrors.IsNotFound(err) {
			t.Errorf("%s: get configmap = %v; want NotFound", ns, err)
		}
	}
}

func TestConfigMapsFollowNamespacesEditsAndBundles(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(t *testing.T, client *fake.Clientset, src *bundles)
		want   string
	}{
		"a new namespace gets the configmap": {
			change: func(t *testing.T, client *fake.Clientset, _ *bundles) {
				if _, err := client.CoreV1().Namespaces().Create(context.Background(), namespace("new"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: "root-1",
		},
		"a deleted configmap is recreated": {
			change: func(t *testing.T, client *fake.Clientset, _ *bundles) {
				if err := client.CoreV1().ConfigMaps("app").Delete(context.Background(), ConfigMapName, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: "root-1",
		},
		"an edited configmap is repaired": {
			change: func(t *testing.T, client *fake.Clientset, _ *bundles) {
				editConfigMap(t, client, "app", func(cm *corev1.ConfigMap) { cm.Data[DataKey] = "forged root" })
			},
			want: "root-1",
		},
		"a removed label is put back": {
			change: func(t *testing.T, client *fake.Clientset, _ *bundles) {
				editConfigMap(t, client, "app", func(cm *corev1.ConfigMap) { delete(cm.Labels, ConfigLabel) })
			},
			want: "root-1",
		},
		"a bundle change updates every namespace": {
			change: func(_ *testing.T, _ *fake.Clientset, src *bundles) { src.set("root-2") },
			want:   "root-2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(namespace("app"), namespace("other"))
			src := newBundles("root-1")
			start(t, client, src)
			for _, ns := range []string{"app", "other"} {
				eventually(t, "configmap in "+ns, holds(client, ns, "root-1"))
			}
			tc.change(t, client, src)
			for _, ns := range []string{"app", "other"} {
				eventually(t, "configmap in "+ns+" holding "+tc.want, holds(client, ns, tc.want))
			}
			if _, err := client.CoreV1().Namespaces().Get(context.Background(), "new", metav1.GetOptions{}); err == nil {
				eventually(t, "configmap in the new namespace", holds(client, "new", tc.want))
			}
		})
	}
}

func TestANamespaceSelectorLimitsTheNamespaces(t *testing.T) {
	selected := namespace("selected")
	selected.Labels = map[string]string{"mesh": "on"}
	later := namespace("later")
	client := fake.NewClientset(selected, later, namespace("ignored"))
	start(t, client, newBundles("root-1"), func(c *Config) { c.NamespaceSelector = "mesh=on" })
	eventually(t, "configmap in the selected namespace", holds(client, "selected", "root-1"))
	later.Labels = map[string]string{"mesh": "on"}
	if _, err := client.CoreV1().Namespaces().Update(context.Background(), later, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "configmap in the namespace labelled later", holds(client, "later", "root-1"))
	if _, err := getConfigMap(client, "ignored"); !apierrors.IsNotFound(err) {
		t.Errorf("get configmap in an unselected namespace = %v; want NotFound", err)
	}
}

func TestRepairKeepsWhatOthersAdded(t *testing.T) {
	client := fake.NewClientset(namespace("app"), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: "app", Labels: map[string]string{"team": "a"}},
		Data:       map[string]string{DataKey: "stale", "note": "kept"},
	})
	start(t, client, newBundles("root-1"))
	eventually(t, "repaired configmap", holds(client, "app", "root-1"))
	cm, _ := getConfigMap(client, "app")
	if cm.Data["note"] != "kept" || cm.Labels["team"] != "a" {
		t.Errorf("repair dropped others' data or labels: data %v labels %v", cm.Data, cm.Labels)
	}
}

func TestUpToDateConfigMapsAreNotWritten(t *testing.T) {
	client := fake.NewClientset(namespace("app"), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: "app", Labels: map[string]string{ConfigLabel: "true"}},
		Data:       map[string]string{DataKey: "root-1"},
	})
	rec, log := logtest.New(t)
	start(t, client, newBundles("root-1"), withLogger(log))
	eventually(t, "app checked", func() bool { return rec.Count(LogChecked, "namespace=app") > 0 })
	if n := countWrites(client, "configmaps"); n != 0 {
		t.Errorf("%d configmap writes; want none", n)
	}
}

func TestTerminatingNamespacesAreLeftAlone(t *testing.T) {
	gone := namespace("gone")
	gone.DeletionTimestamp = ptr.To(metav1.Now())
	gone.Finalizers = []string{"kubernetes"}
	client := fake.NewClientset(gone, namespace("dying"), namespace("app"))
	var refused atomic.Int32
	client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "dying" {
			return false, nil, nil
		}
		refused.Add(1)
		err := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, ConfigMapName,
			errors.New("unable to create new content in namespace dying because it is being terminated"))
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
		return true, nil, err
	})
	rec, log := logtest.New(t)
	start(t, client, newBundles("root-1"), withLogger(log))
	eventually(t, "configmap in app", holds(client, "app", "root-1"))
	// A check of dying has settled whether it is retried, 5ms, 10ms,
	// 20ms... later: it is not.
	eventually(t, "dying checked after a refused create", func() bool {
		return refused.Load() > 0 && rec.Count(LogChecked, "namespace=dying") > 0
	})
	if n := rec.Count(LogChecked, "namespace=dying", "retry=true"); n != 0 {
		t.Errorf("%d checks of a terminating namespace retried; want none", n)
	}
	for _, a := range client.Actions() {
		if a.GetNamespace() == "gone" && a.GetResource().Resource == "configmaps" && a.GetVerb() == "create" {
			t.Errorf("created a configmap in a namespace with a deletion timestamp")
		}
	}
}

func TestFailedWritesAreRetried(t *testing.T) {
	client := fake.NewClientset(namespace("app"))
	var failures atomic.Int32
	client.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is slow")
		}
		return false, nil, nil
	})
	start(t, client, newBundles("root-1"))
	eventually(t, "configmap after three failures", holds(client, "app", "root-1"))
}

func TestAFollowerDoesNotWrite(t *testing.T) {
	// Another replica holds a fresh lease that outlives the test.
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: "istio-system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("istiod-other"),
			LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	client := fake.NewClientset(namespace("app"), lease)
	gets := leaseGets(client)
	c, _ := start(t, client, newBundles("root-1"))
	eventually(t, "synced caches", c.HasSynced)
	// Each attempt to acquire the lease reads it first: after the second
	// read the first attempt has lost.
	eventually(t, "two attempts at the lease", func() bool { return gets.Load() >= 2 })
	if c.IsLeader() {
		t.Error("IsLeader while another replica holds the lease")
	}
	if n := countWrites(client, "configmaps"); n != 0 {
		t.Errorf("follower made %d configmap writes; want none", n)
	}
}

func TestStoppingTheLeaderReleasesTheLease(t *testing.T) {
	client := fake.NewClientset(namespace("app"))
	c, stop := start(t, client, newBundles("root-1"))
	eventually(t, "leadership", c.IsLeader)
	stop()
	if c.IsLeader() {
		t.Error("IsLeader after Run returned")
	}
	lease, err := client.CoordinationV1().Leases("istio-system").Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("lease still held by %q after the leader stopped", h)
	}
}

func TestNewChecksTheConfig(t *testing.T) {
	valid := func() Config {
		return Config{Client: fake.NewClientset(), Namespace: "istio-system", Identity: "istiod-0", Bundles: newBundles("r")}
	}
	for name, tc := range map[string]struct {
		change func(*Config)
		want   string
	}{
		"no client":                            {func(c *Config) { c.Client = nil }, "client is required"},
		"no namespace":                         {func(c *Config) { c.Namespace = "" }, "namespace is required"},
		"no identity":                          {func(c *Config) { c.Identity = "" }, "identity is required"},
		"no bundle source":                     {func(c *Config) { c.Bundles = nil }, "bundle source is required"},
		"a renew deadline above the lease":     {func(c *Config) { c.RenewDeadline = time.Minute }, "must exceed renew deadline"},
		"a retry period near the deadline":     {func(c *Config) { c.RetryPeriod = 9 * time.Second }, "must exceed 1.2 × retry period"},
		"negative workers":                     {func(c *Config) { c.Workers = -1 }, "negative"},
		"defaults are valid (no error wanted)": {func(*Config) {}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := valid()
			tc.change(&cfg)
			c, err := New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(c.Identity(), "istiod-0_") || len(c.Identity()) != len("istiod-0_")+8 {
					t.Errorf("identity %q; want istiod-0_ and 8 hex digits", c.Identity())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestTwoControllersGetDistinctIdentities(t *testing.T) {
	cfg := Config{Client: fake.NewClientset(), Namespace: "istio-system", Identity: "istiod-0", Bundles: newBundles("r")}
	a, _ := New(cfg)
	b, _ := New(cfg)
	if a.Identity() == b.Identity() {
		t.Errorf("two controllers share the identity %q", a.Identity())
	}
}

func editConfigMap(t *testing.T, client *fake.Clientset, ns string, edit func(*corev1.ConfigMap)) {
	t.Helper()
	cm, err := getConfigMap(client, ns)
	if err != nil {
		t.Fatal(err)
	}
	edit(cm)
	if _, err := client.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestALeaderThatCannotRenewStopsBeforeTheLeaseExpires(t *testing.T) {
	client := fake.NewClientset(namespace("app"))
	// Once cut, every Lease write hangs, as when the API server does not
	// answer; so does client-go's attempt to release the Lease.
	var cut atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cut.Load() {
			time.Sleep(4 * time.Second)
			return true, nil, apierrors.NewServiceUnavailable("no answer")
		}
		return false, nil, nil
	})
	var cfg Config
	fastLease(&cfg)
	c, _ := start(t, client, newBundles("root-1"))
	t.Cleanup(func() { cut.Store(false) }) // before the controller stops
	eventually(t, "leadership", c.IsLeader)
	cut.Store(true)
	cutAt := time.Now()
	eventually(t, "stopped leading", func() bool { return !c.IsLeader() })
	took := time.Since(cutAt)
	t.Logf("stopped writing %v after the Lease writes began to hang (renew deadline %v, lease duration %v)",
		took.Round(time.Millisecond), cfg.RenewDeadline, cfg.LeaseDuration)
	// The Lease was last renewed at most a retry period before the cut;
	// another replica may take it LeaseDuration after it saw that renewal.
	if took >= cfg.LeaseDuration {
		t.Errorf("still leading %v after the last renewal could have happened; the Lease expires after %v", took, cfg.LeaseDuration)
	}
}

// Istio's istiod, beside Bulwark during a move, writes the same roots in
// its own bytes (a plugged-in root file as the operator gave it): the
// ConfigMap is left as it is, or the two would rewrite it after each
// other without end. Other roots, one root more, or a block that is not
// a certificate are repaired.
func TestTheSameRootsInOtherBytesAreNotRewritten(t *testing.T) {
	root, other := catest.NewRoot(t), catest.NewRoot(t)
	ours := string(root.CertPEM)
	for name, tc := range map[string]struct {
		data    string
		rewrite bool
	}{
		"a comment before the root":  {data: "# the mesh's root, from the security team\n" + ours},
		"the root twice":             {data: ours + ours},
		"another root":               {data: string(other.CertPEM), rewrite: true},
		"the root and another":       {data: ours + string(other.CertPEM), rewrite: true},
		"the root and a key":         {data: ours + string(root.KeyPEM), rewrite: true},
		"text without a certificate": {data: "not a certificate", rewrite: true},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(namespace("app"), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: "app", Labels: map[string]string{ConfigLabel: "true"}},
				Data:       map[string]string{DataKey: tc.data},
			})
			// One worker: namespaces are judged in the order they come.
			c, _ := start(t, client, newBundles(ours), func(c *Config) { c.Workers = 1 })
			eventually(t, "leadership and synced caches", func() bool { return c.IsLeader() && c.HasSynced() })
			if tc.rewrite {
				eventually(t, "repaired configmap", holds(client, "app", ours))
				return
			}
			// A namespace created after the first pass is judged after
			// "app": once it has its ConfigMap, "app" was judged.
			if _, err := client.CoreV1().Namespaces().Create(context.Background(), namespace("later"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the later namespace's configmap", holds(client, "later", ours))
			if cm, _ := getConfigMap(client, "app"); cm.Data[DataKey] != tc.data {
				t.Errorf("the same roots in other bytes were rewritten:\n%s", cm.Data[DataKey])
			}
		})
	}
}
