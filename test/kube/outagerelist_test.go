package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

// Outages of TestInformersResyncWhenTheAPIServerReturns: how many, how
// long each (long enough for client-go's reflector backoff to reach its
// cap, 30 s jittered to [30, 60) s, had it been let loose), and how soon
// after the return a new namespace must have its root certificate.
const (
	relistOutages   = 3
	relistOutageFor = 45 * time.Second
	relistWithin    = 3 * time.Second
)

// TestInformersResyncWhenTheAPIServerReturns stops etcd and the API server
// under a running istiod, starts them again on the same data after
// relistOutageFor, and creates a namespace as soon as the API server
// answers: istiod's namespace informer and leader election must see it
// and write istio-ca-root-cert into it within relistWithin, after each of
// relistOutages outages in a row. Before the informers waited at the gate
// of the API server monitor, client-go's reflector backoff held the
// relist for up to a minute after the return (20 s, 20 s, more than 10 s
// twice, 0.5 s in five runs).
func TestInformersResyncWhenTheAPIServerReturns(t *testing.T) {
	t.Parallel()
	env, ns, _ := privateCluster(t)
	client := env.Client(t)
	p := newIstiodIn(t, env, "istiod", ns, istiodKubeconfig(t, env, ns))
	p.run(t)
	waitFor(t, "istiod ready", 90*time.Second, p.ready)
	waitFor(t, "istiod leading the namespace controller", 60*time.Second, p.leading)
	ctx := context.Background()
	hasRootCert := func(ns string) func() bool {
		return func() bool {
			cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootcert.ConfigMapName, metav1.GetOptions{})
			return err == nil && cm.Data[rootcert.DataKey] != ""
		}
	}
	waitFor(t, "istio-ca-root-cert in a namespace created before any outage", 30*time.Second, hasRootCert(env.Namespace(t)))

	var took []time.Duration
	for run := 1; run <= relistOutages; run++ {
		env.Stop(t)
		down := time.Now()
		waitFor(t, "istiod noticing the outage", 30*time.Second, func() bool {
			return p.metric(t, "bulwark_kube_apiserver_reachable") == 0
		})
		time.Sleep(time.Until(down.Add(relistOutageFor))) // the outage itself, not a wait for an event
		restart := env.Restart(t)
		created := time.Now()
		fresh := env.Namespace(t)
		waitFor(t, "istio-ca-root-cert in the namespace created after the return", 60*time.Second, hasRootCert(fresh))
		d := time.Since(created)
		took = append(took, d)
		t.Logf("outage %d of %v (restart took %v): istio-ca-root-cert in the new namespace after %v",
			run, time.Since(down).Round(time.Second), restart.Round(time.Millisecond), d.Round(time.Millisecond))
		if d > relistWithin {
			t.Errorf("outage %d: istio-ca-root-cert after %v, want within %v", run, d.Round(time.Millisecond), relistWithin)
		}
	}
	slices.Sort(took)
	t.Logf("%d outages: median %v, worst %v", len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	select {
	case <-p.exited:
		t.Fatal("istiod exited")
	default:
	}
}
