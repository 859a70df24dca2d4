package kube

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// compactEtcd compacts etcd's history up to its current revision, through
// etcd's JSON gateway, so that no watch can resume from before it.
func compactEtcd(t *testing.T, env *testenv.Env) int64 {
	t.Helper()
	post := func(path, body string, out any) {
		t.Helper()
		resp, err := http.Post(env.EtcdURL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("etcd %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %s", path, resp.Status)
		}
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("etcd %s: %v", path, err)
			}
		}
	}
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	post("/v3/kv/range", `{"key":"AA=="}`, &rng)
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		t.Fatalf("etcd revision %q: %v", rng.Header.Revision, err)
	}
	post("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil)
	return rev
}

// reflectorLog captures client-go's reflector log lines (klog, verbosity 4
// for reflector.go only), where a watch closed with 410 Gone shows as
// "too old resource version". klog is process-wide: the test using it must
// not run in parallel with others that restart an API server.
func reflectorLog(t *testing.T) *logtest.Buffer {
	t.Helper()
	buf := &logtest.Buffer{}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"vmodule": "reflector=4", "logtostderr": "false", "alsologtostderr": "false"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(io.MultiWriter(buf, os.Stderr))
	t.Cleanup(func() {
		_ = fs.Set("vmodule", "")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}

// relistKinds are the built-in kinds whose watches must expire and relist.
var relistKinds = []string{"*v1.Pod", "*v1.EndpointSlice", "*v1.Service", "*v1.Namespace", "*v1.ConfigMap"}

// TestWatchExpiredRelistsWithoutAPush has istiod's watches expire: while
// istiod cannot reach it, the API server's history moves on and etcd is
// compacted past istiod's resource versions, and the API server restarts
// with a watch cache that starts after them. istiod's informers then
// relist, without a restart; since nothing in the mesh
// changed, no model is published and no proxy gets a push. A change after
// that still arrives: the new watches work.
//
// Not parallel: see reflectorLog.
func TestWatchExpiredRelistsWithoutAPush(t *testing.T) {
	klogs := reflectorLog(t)
	env, ns, apiHost := privateCluster(t)
	client := env.Client(t)
	lnk := newLink(t, apiHost)
	p := newIstiodIn(t, env, "istiod", ns, kubeconfigVia(t, istiodKubeconfig(t, env, ns), env.URL, lnk.URL()))
	p.run(t)
	waitFor(t, "istiod ready", 90*time.Second, p.ready)

	mesh := newOutageMesh(t, env)
	roots := p.roots(t, env)
	ads := p.dialADS(t, roots, p.workloadCert(t, env, roots, mesh.app, "client"), mesh.app, "client")
	ads.subscribe(typeCluster, mesh.clusterName)
	await(ads, "echo's cluster", typeCluster, clusterTLS(mesh.clusterName, false))
	ads.subscribe(typeEndpoint, mesh.clusterName)
	await(ads, "echo's endpoint", typeEndpoint, func(cs []*endpoint.ClusterLoadAssignment) bool {
		return len(cs) == 1 && slices.Equal(addresses(cs[0]), []string{"10.20.0.1:9000"})
	})

	// istiod loses the API server; history it has not seen piles up and is
	// compacted away; the API server restarts with a fresh watch cache.
	lnk.Cut()
	ctx := context.Background()
	for i := range 20 {
		if _, err := client.CoordinationV1().Leases(mesh.app).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("etcd compacted at revision %d", compactEtcd(t, env))
	env.Stop(t)
	env.Restart(t)
	published := countLines(p.logs.String(), `msg="mesh model published"`)
	pushes := countLines(p.logs.String(), `msg="pushing model"`)

	populated := map[string]int{}
	for _, kind := range relistKinds {
		populated[kind] = countLines(klogs.String(), "Caches populated", `type="`+kind+`"`)
	}
	lnk.Restore()
	back := time.Now()
	// The built-in kinds the mesh model and the root certificates are
	// built from relist: their resource versions are gone. A watch that
	// resumed from one while the API server was away failed at once and
	// sent its reflector to relist (kubewatch's gate holds only the
	// relist); one that reached the restarted API server was told 410
	// Gone. (The Istio kinds relist too, or resume where a CRD's watch
	// cache starts late enough, so they are not required. Secrets are
	// watched only where a proxy asks for one: none does here.)
	for _, kind := range relistKinds {
		waitFor(t, "istiod's relist of "+kind, 90*time.Second, func() bool {
			return countLines(klogs.String(), "Caches populated", `type="`+kind+`"`) > populated[kind]
		})
	}
	t.Logf("every watch relisted %v after the API server was reachable again (%d told 410 Gone)", time.Since(back).Round(time.Millisecond),
		countLines(klogs.String(), "too old resource version"))

	// Nothing changed in the mesh: nothing is published or pushed. The
	// relist's events are behind once a later change the model reads (a
	// Service no proxy asks for) is published and pushed.
	for drained := false; !drained; {
		select {
		case r := <-ads.resps:
			t.Errorf("a push after a relist that changed nothing: %s version %s", r.TypeUrl, r.VersionInfo)
		case err := <-ads.errc:
			t.Fatalf("the proxy's stream ended: %v", err)
		default:
			drained = true
		}
	}
	p.catchUp(t, client, mesh.app, "canary")
	if n := countLines(p.logs.String(), `msg="mesh model published"`) - 1; n != published {
		t.Errorf("%d models published by the relist, want none", n-published)
	}
	if n := countLines(p.logs.String(), `msg="pushing model"`) - 1; n != pushes {
		t.Errorf("%d pushes after the relist, want none", n-pushes)
	}
	select {
	case <-p.exited:
		t.Fatal("istiod exited")
	default:
	}

	// The watches after the relist work: a change arrives.
	pod := createPod(t, client, mesh.app, "echo-2", "echo", "10.20.0.2", map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"})
	slice, err := client.DiscoveryV1().EndpointSlices(mesh.app).Get(ctx, "echo-x1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = append(slice.Endpoints, podEndpoint(pod))
	if _, err := client.DiscoveryV1().EndpointSlices(mesh.app).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	await(ads, "the new endpoint, pushed after the relist", typeEndpoint, func(cs []*endpoint.ClusterLoadAssignment) bool {
		return len(cs) == 1 && slices.Equal(addresses(cs[0]), []string{"10.20.0.1:9000", "10.20.0.2:9000"})
	})
	t.Logf("a change after the relist pushed in %v", time.Since(changed).Round(time.Millisecond))
}
