package bootstrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

func TestRunCARetriesUntilTheAPIServerAnswers(t *testing.T) {
	client := fake.NewClientset()
	var gets atomic.Int32
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("apiserver starting")
		}
		return false, nil, nil
	})
	k := newKubePartsWithClient(client, "istio-system", "istiod-0", catest.Logger(t))
	k.backoff = caLoadBackoff{first: time.Millisecond, max: 4 * time.Millisecond, attemptTimeout: time.Second}
	authority, err := ca.New(ca.Config{
		TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"),
		Store:       k.store,
		Logger:      catest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.runCA(ctx, authority) }()
	deadline := time.Now().Add(10 * time.Second)
	for !authority.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the CA did not load after the API server recovered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := gets.Load(); n < 4 {
		t.Errorf("%d reads of the secret; want 3 refused and one answered", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runCA = %v; want nil after cancel", err)
	}
}

func TestRunCAStopsRetryingWhenCancelled(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("*", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver down")
	})
	k := newKubePartsWithClient(client, "istio-system", "istiod-0", catest.Logger(t))
	k.backoff = caLoadBackoff{first: time.Millisecond, max: 2 * time.Millisecond, attemptTimeout: time.Second}
	authority, err := ca.New(ca.Config{
		TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"),
		Store:       k.store,
		Logger:      catest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := k.runCA(ctx, authority); err != nil {
		t.Errorf("runCA = %v; want nil: an unreachable API server is not fatal", err)
	}
	if authority.Ready() {
		t.Error("the CA is ready although its store never answered")
	}
}

func TestKubeRESTConfigReadsTheKubeconfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	kubeconfig := `{"apiVersion": "v1", "kind": "Config", "current-context": "c",
		"clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
		"users": [{"name": "u", "user": {"token": "t"}}],
		"contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		kubeconfig string
		wantErr    string
	}{
		"a kubeconfig names the server":        {kubeconfig: path},
		"a missing kubeconfig is an error":     {kubeconfig: filepath.Join(dir, "absent"), wantErr: "kubernetes client config"},
		"outside a cluster there is no config": {kubeconfig: "", wantErr: "kubernetes client config"},
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := kubeRESTConfig(Config{Kubeconfig: tc.kubeconfig})
			if tc.kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				// Inside a cluster the pod's service account is the config.
				if err != nil {
					t.Fatalf("in-cluster config: %v", err)
				}
				return
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("kubeRESTConfig = %v; want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != "t" {
				t.Errorf("host %q token %q; want the kubeconfig's", rc.Host, rc.BearerToken)
			}
			if rc.QPS != kubeQPS || rc.Burst != kubeBurst || !strings.HasPrefix(rc.UserAgent, "istiod") {
				t.Errorf("qps %v burst %d user agent %q; want %d, %d, istiod", rc.QPS, rc.Burst, rc.UserAgent, kubeQPS, kubeBurst)
			}
		})
	}
}

func TestKubePartsNameTheReplica(t *testing.T) {
	host, _ := os.Hostname()
	for name, tc := range map[string]struct {
		podName, want string
	}{
		"the pod name names the replica":   {podName: "istiod-7d9f-abcde", want: "istiod-7d9f-abcde"},
		"without a pod name, the hostname": {podName: "", want: host},
	} {
		t.Run(name, func(t *testing.T) {
			k := newKubePartsWithClient(fake.NewClientset(), "istio-system", tc.podName, catest.Logger(t))
			if k.identity != tc.want {
				t.Errorf("identity %q; want %q", k.identity, tc.want)
			}
		})
	}
}
