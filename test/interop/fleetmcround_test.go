package interop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/loadgen"
)

// Phases of a multi-cluster round besides the fleet's initial and move
// (the local move).
const (
	phaseRemotes    = "remote clusters"
	phaseRemoteMove = "remote move"
)

// mcRound is what one multi-cluster round measured for one control plane.
type mcRound struct {
	fleet *fleetRound // the initial configuration; failed phases
	// heap and rss with 0, 1, 2, … remote clusters registered.
	heap, rss []int64
	synced    []time.Duration // each remote: from its secret applied to clusterz "synced"
	remote    mcMove          // an endpoint moved in the first remote
	local     mcMove          // an endpoint moved in the primary
}

// mcMove is how one endpoint move reached the proxies.
type mcMove struct {
	p50, p99, max, cpu time.Duration
	sent               int // proxies sent anything
}

// runMCRound registers the remotes with the control plane cp, connects
// the fleet and moves an endpoint in a remote and in the primary, then
// stops cp and restores the clusters: the remote secrets deleted, the
// moved pods back.
func runMCRound(b *testing.B, size fleetSize, mc *fleetMC, cp *fleetCP, kind string, round int) *mcRound {
	r := &fleetRun{b: b, cfg: size, mesh: mc.local, cp: cp, kind: kind, round: round, res: &fleetRound{},
		initialEDS: mc.expected()}
	res := &mcRound{fleet: r.res}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.finish()
	if !mc.register(ctx, r, res) {
		r.res.failed[phaseInitial], r.res.failed[phaseRemoteMove], r.res.failed[phaseMove] = true, true, true
		return res
	}
	if !r.initial(ctx) {
		r.res.failed[phaseRemoteMove] = true
		return res
	}
	defer r.f.stop()
	last := len(mc.local.services) - 1
	res.remote = mc.move(ctx, r, phaseRemoteMove, mc.remotes[0].mesh, last)
	res.local = mc.move(ctx, r, phaseMove, mc.local, last-1)
	fleetNote("%s round %d: remote move p50 %s p99 %s max %s (cpu %s, %d proxies sent anything); local move p99 %s (cpu %s, %d sent)",
		kind, round, res.remote.p50.Round(time.Millisecond), res.remote.p99.Round(time.Millisecond),
		res.remote.max.Round(time.Millisecond), res.remote.cpu, res.remote.sent,
		res.local.p99.Round(time.Millisecond), res.local.cpu, res.local.sent)
	return res
}

// register measures the control plane's memory with no remote cluster,
// then applies each remote secret in turn and measures it again once the
// cluster is synced and the control plane quiet. It reports whether every
// remote was synced.
func (mc *fleetMC) register(ctx context.Context, r *fleetRun, res *mcRound) bool {
	b, cp := r.b, r.cp
	measure := func() {
		cp.waitQuiet(b)
		heap, rss := cp.memory(b)
		res.heap, res.rss = append(res.heap, heap), append(res.rss, rss)
	}
	measure()
	secrets := mc.local.kube.CoreV1().Secrets(mc.local.root)
	for _, rc := range mc.remotes {
		secret := rc.secret.DeepCopy()
		secret.Namespace = mc.local.root
		start := time.Now()
		if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			b.Fatalf("apply the remote secret of %s: %v", rc.id, err)
		}
		r.undo.add(func(ctx context.Context) error {
			return secrets.Delete(ctx, secret.Name, metav1.DeleteOptions{})
		})
		if err := clusterzWait(cp.monitoring, rc.id, "synced", fleetInitialTimeout); err != nil {
			r.fail(phaseRemotes, "%v", err)
			return false
		}
		res.synced = append(res.synced, time.Since(start))
		measure()
	}
	fleetNote("%s round %d: %d remote clusters synced in %v; live heap %v, RSS %v (MiB, by remotes registered)",
		r.kind, r.round, len(mc.remotes), roundAll(res.synced), mib(res.heap), mib(res.rss))
	return true
}

// move replaces the second pod of the i-th service of in, one of the
// clusters, and waits until every proxy holds the service's endpoints of
// every cluster with the new pod's.
func (mc *fleetMC) move(ctx context.Context, r *fleetRun, phase string, in *fleetMesh, i int) mcMove {
	s := in.services[i]
	repl := in.newPod(s.pods[1], fmt.Sprintf("mc%d%s", r.round, r.kind[:1]))
	want := *s
	want.pods[1] = repl
	merged := mc.servicesAt(i)
	merged[slices.Index(merged, s)] = &want
	var depart func(string)
	if in == mc.local {
		depart = r.f.depart // a remote pod has no sidecar in the fleet
	}
	g := &fleetGoal{eds: map[string]uint64{s.cluster(): mergedFingerprint(merged...)}}
	start, cpu, ok := r.change(ctx, phase, g, func(ctx context.Context) error {
		return in.replacePod(ctx, s, 1, repl, depart, &r.undo)
	})
	if !ok {
		return mcMove{}
	}
	met, _, _, _, _ := r.f.goalTimes(start, nil)
	slices.Sort(met)
	return mcMove{p50: loadgen.Quantile(met, 0.5), p99: loadgen.Quantile(met, 0.99), max: met[len(met)-1],
		cpu: cpu, sent: r.f.sentSince(start)}
}

func mib(v []int64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.1f", float64(x)/(1<<20))
	}
	return out
}

func roundAll(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Millisecond)
	}
	return out
}
