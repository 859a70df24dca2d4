package interop

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/loadgen"
	"github.com/bulwark-mesh/bulwark/internal/proccpu"
)

const (
	fleetInitialTimeout = 10 * time.Minute
	fleetChangeTimeout  = 3 * time.Minute
	fleetBurstSize      = 50
	fleetBurstSpread    = time.Second
	fleetSamples        = 3 // proxies whose endpoints are compared between control planes
)

// fleetRound is what one round measured for one control plane. A phase
// that did not converge is named in failed, and its figures left out.
type fleetRound struct {
	initAll, initP50, initP99 time.Duration // whole fleet from the first dial; per proxy from its stream's opening
	initKiB                   float64       // median received per proxy until full config
	initCPU, initFleetCPU     time.Duration // the control plane's, the fleet's
	refused                   int64
	heapKiB, rssKiB           float64 // per proxy
	// The live heap with the mesh loaded and no proxy connected, per
	// service: what the model costs, with the control plane's own fixed
	// share spread over the services.
	heapPerServiceKiB         float64
	moveP50, moveP99, moveMax time.Duration
	moveCPU                   time.Duration
	burstAll, burstCPU        time.Duration
	burstWrites               time.Duration // from the first to the last API write
	newClusterP99, newEDSP99  time.Duration
	newGap, newCPU            time.Duration
	policyP99, policyCPU      time.Duration
	policyPushed              int // proxies that received listeners after the policy change
	// The rule changes (fleetrules_test.go): p99 of the proxies concerned,
	// CPU, and the proxies sent anything.
	vsP99, vsCPU, drP99, drCPU      time.Duration
	vsAffected, vsPushed, drPushed  int
	meshVSP50, meshVSP99, meshVSCPU time.Duration
	meshVSAffected, meshVSPushed    int
	changeFleetCPU                  time.Duration // the fleet's, over all changes
	samples                         map[string]proxySnapshot
	failed                          map[string]bool // phases not every proxy got through
}

// fleetRun is one round in progress.
type fleetRun struct {
	b     *testing.B
	cfg   fleetSize
	mesh  *fleetMesh
	cp    *fleetCP
	f     *fleetEnvoys
	kind  string
	round int
	res   *fleetRound
	undo  undoList
	// initialEDS is the endpoints every proxy must hold at first: when
	// nil, those of the mesh's own services.
	initialEDS map[string]uint64
}

func selfCPU(b *testing.B) time.Duration {
	d, err := proccpu.Of(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// runFleetRound starts a fresh control plane, connects the fleet, makes
// each change in turn, then stops everything and restores the mesh.
func runFleetRound(b *testing.B, cfg fleetSize, mesh *fleetMesh, cp *fleetCP, kind string, round int) *fleetRound {
	r := &fleetRun{b: b, cfg: cfg, mesh: mesh, cp: cp, kind: kind, round: round, res: &fleetRound{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.finish()
	if !r.initial(ctx) {
		return r.res
	}
	defer r.f.stop()
	fleet0 := selfCPU(b)
	r.move(ctx)
	r.burst(ctx)
	r.newService(ctx)
	r.policy(ctx)
	r.virtualService(ctx)
	r.meshVirtualService(ctx)
	r.destinationRule(ctx)
	r.res.changeFleetCPU = selfCPU(b) - fleet0
	x := r.res
	fleetNote("%s round %d: move p99 %s (cpu %s); burst %s (cpu %s, writes over %s); new service eds p99 %s (cpu %s); policy p99 %s (cpu %s, %d proxies sent listeners)",
		kind, round, x.moveP99.Round(time.Millisecond), x.moveCPU, x.burstAll.Round(time.Millisecond), x.burstCPU,
		x.burstWrites.Round(time.Millisecond), x.newEDSP99.Round(time.Millisecond), x.newCPU,
		x.policyP99.Round(time.Millisecond), x.policyCPU, x.policyPushed)
	fleetNote("%s round %d: virtual service p99 %s (cpu %s, %d proxies see it, %d sent anything); mesh-wide virtual service p50 %s, p99 %s (cpu %s, %d proxies see it, %d sent anything); destination rule p99 %s (cpu %s, %d proxies sent anything)",
		kind, round, x.vsP99.Round(time.Millisecond), x.vsCPU, x.vsAffected, x.vsPushed,
		x.meshVSP50.Round(time.Millisecond), x.meshVSP99.Round(time.Millisecond), x.meshVSCPU, x.meshVSAffected, x.meshVSPushed,
		x.drP99.Round(time.Millisecond), x.drCPU, x.drPushed)
	return r.res
}

// finish stops the control plane and undoes the round's changes.
func (r *fleetRun) finish() {
	r.cp.stop(r.b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.undo.run(ctx); err != nil {
		r.b.Fatalf("restore the mesh after %s round %d: %v", r.kind, r.round, err)
	}
}

// Phases of a round, as fleetRound.failed names them.
const (
	phaseInitial = "initial"
	phaseMove    = "move"
	phaseBurst   = "burst"
	phaseNewSvc  = "new service"
	phasePolicy  = "policy"
)

// fail records that phase did not complete, and why.
func (r *fleetRun) fail(phase, format string, args ...any) {
	if r.res.failed == nil {
		r.res.failed = map[string]bool{}
	}
	r.res.failed[phase] = true
	msg := fmt.Sprintf("%s round %d: %s: %s", r.kind, r.round, phase, fmt.Sprintf(format, args...))
	if r.kind == fleetBulwark {
		r.b.Error(msg) // the product failing to converge is a fault
		return
	}
	fleetNote("%s", msg) // Istio is the baseline: its figures are left out
}

// initial connects every proxy at once and waits until each holds the
// whole configuration with every service's endpoints.
func (r *fleetRun) initial(ctx context.Context) bool {
	b, cp := r.b, r.cp
	cp.waitQuiet(b)
	heap0, rss0 := cp.memory(b)
	cp.heapProfile(b, fmt.Sprintf("heap-before-proxies-%d", r.round))
	pods := r.mesh.proxyPods(r.cfg.proxies)
	samples := map[string]bool{}
	for k := range fleetSamples {
		samples[pods[k*(len(pods)-1)/(fleetSamples-1)].name] = true
	}
	f, err := newFleetEnvoys(cp.xds, pods, samples, fleetNodeInfo{istiodNS: r.mesh.root, clusterID: "Kubernetes"})
	if err != nil {
		b.Fatal(err)
	}
	r.f = f
	eds := r.initialEDS
	if eds == nil {
		eds = r.mesh.expected()
	}
	f.install(&fleetGoal{eds: eds, complete: true})
	cpu0, fleet0 := cp.cpu(b), selfCPU(b)
	start := time.Now()
	f.start(ctx)
	ok := f.waitGoal(fleetInitialTimeout)
	r.res.initAll = time.Since(start)
	r.res.initFleetCPU = selfCPU(b) - fleet0
	r.res.refused = f.refused.Load()
	if !ok {
		r.fail(phaseInitial, "not every proxy holds the whole configuration after %s: %s", fleetInitialTimeout, f.progress())
		for _, phase := range []string{phaseMove, phaseBurst, phaseNewSvc, phasePolicy, phaseVS, phaseMeshVS, phaseDR} {
			r.res.failed[phase] = true
		}
		f.stop()
		return false
	}
	r.res.initCPU = cp.waitQuiet(b) - cpu0
	var after []time.Duration
	var kib []float64
	for _, p := range f.proxies {
		p.mu.Lock()
		after = append(after, p.readyAfter)
		kib = append(kib, float64(p.readyBytes)/1024)
		p.mu.Unlock()
	}
	slices.Sort(after)
	r.res.initP50, r.res.initP99 = loadgen.Quantile(after, 0.5), loadgen.Quantile(after, 0.99)
	r.res.initKiB = median(kib)
	heap1, rss1 := cp.memory(b)
	cp.heapProfile(b, fmt.Sprintf("heap-with-proxies-%d", r.round))
	n := float64(len(pods))
	r.res.heapKiB, r.res.rssKiB = float64(heap1-heap0)/1024/n, float64(rss1-rss0)/1024/n
	r.res.heapPerServiceKiB = float64(heap0) / 1024 / float64(len(r.mesh.services))
	r.res.samples = map[string]proxySnapshot{}
	for _, p := range f.proxies {
		if p.detail {
			r.res.samples[p.pod.name] = p.snapshot()
		}
	}
	fleetNote("%s round %d: initial config in %s; %s", r.kind, r.round, r.res.initAll.Round(time.Millisecond), f.progress())
	return true
}

// change installs g, makes the change with write, and waits until every
// proxy meets g and the control plane is quiet again. It returns the
// time of the first write and the control plane's CPU for the change.
func (r *fleetRun) change(ctx context.Context, phase string, g *fleetGoal, write func(context.Context) error) (time.Time, time.Duration, bool) {
	r.f.install(g)
	cpu0 := r.cp.cpu(r.b)
	profiled := r.cp.profile(r.b, fmt.Sprintf("%s-%d-%s", r.kind, r.round, strings.ReplaceAll(phase, " ", "-")))
	start := time.Now()
	if err := write(ctx); err != nil {
		r.b.Fatalf("%s: %v", phase, err)
	}
	ok := r.f.waitGoal(fleetChangeTimeout)
	if !ok {
		r.fail(phase, "not every proxy got it after %s: %s", fleetChangeTimeout, r.f.progress())
	}
	cpu := r.cp.waitQuiet(r.b) - cpu0
	profiled()
	return start, cpu, ok
}

// move replaces the second pod of the last service.
func (r *fleetRun) move(ctx context.Context) {
	s := r.mesh.services[len(r.mesh.services)-1]
	repl := r.mesh.newPod(s.pods[1], fmt.Sprintf("m%d%s", r.round, r.kind[:1]))
	want := *s
	want.pods[1] = repl
	g := &fleetGoal{eds: map[string]uint64{s.cluster(): want.fingerprint()}}
	start, cpu, ok := r.change(ctx, phaseMove, g, func(ctx context.Context) error {
		return r.mesh.replacePod(ctx, s, 1, repl, r.f.depart, &r.undo)
	})
	if !ok {
		return
	}
	met, _, _, _, _ := r.f.goalTimes(start, nil)
	slices.Sort(met)
	r.res.moveP50, r.res.moveP99, r.res.moveMax = loadgen.Quantile(met, 0.5), loadgen.Quantile(met, 0.99), met[len(met)-1]
	r.res.moveCPU = cpu
}

// burst replaces the second pods of fleetBurstSize other services, the
// changes spread over fleetBurstSpread.
func (r *fleetRun) burst(ctx context.Context) {
	all := r.mesh.services
	services := all[max(0, len(all)-1-fleetBurstSize) : len(all)-1]
	repls := make([]*fleetPod, len(services))
	g := &fleetGoal{eds: map[string]uint64{}}
	for k, s := range services {
		repls[k] = r.mesh.newPod(s.pods[1], fmt.Sprintf("b%d%s", r.round, r.kind[:1]))
		want := *s
		want.pods[1] = repls[k]
		g.eds[s.cluster()] = want.fingerprint()
	}
	var writes time.Duration
	start, cpu, ok := r.change(ctx, phaseBurst, g, func(ctx context.Context) error {
		t := time.Now()
		err := r.mesh.burst(ctx, services, 1, repls, fleetBurstSpread, r.f.depart, &r.undo)
		writes = time.Since(t)
		return err
	})
	r.res.burstWrites = writes
	if !ok {
		return
	}
	met, _, _, _, _ := r.f.goalTimes(start, nil)
	r.res.burstAll, r.res.burstCPU = slices.Max(met), cpu
}

// newService adds a service; every proxy must get its cluster, its
// endpoints, and the route or listener naming its host.
func (r *fleetRun) newService(ctx context.Context) {
	s := r.mesh.plannedService(fmt.Sprintf("fleet-new-%s-%d", r.kind, r.round), r.mesh.namespaces[0])
	g := &fleetGoal{eds: map[string]uint64{s.cluster(): s.fingerprint()}, cluster: s.cluster(), needle: []byte(s.host())}
	start, cpu, ok := r.change(ctx, phaseNewSvc, g, func(ctx context.Context) error {
		return r.mesh.addService(ctx, s, &r.undo)
	})
	if !ok {
		return
	}
	_, eds, cluster, needle, _ := r.f.goalTimes(start, nil)
	for i := range eds {
		r.res.newGap = max(r.res.newGap, eds[i]-needle[i])
	}
	slices.Sort(eds)
	slices.Sort(cluster)
	r.res.newEDSP99, r.res.newClusterP99, r.res.newCPU = loadgen.Quantile(eds, 0.99), loadgen.Quantile(cluster, 0.99), cpu
}

// policy admits one more principal in the first service's
// AuthorizationPolicy: that service's sidecars must get a listener naming
// it.
func (r *fleetRun) policy(ctx context.Context) {
	s := r.mesh.services[0]
	marker := fmt.Sprintf("fleet-edit-%s-%d", r.kind, r.round)
	affected := map[*fleetProxy]bool{}
	for _, p := range r.f.present() {
		if p.pod.app == s.name {
			affected[p] = true
		}
	}
	g := &fleetGoal{needle: []byte(marker), needleFor: affected}
	principal := fmt.Sprintf("%s/ns/%s/sa/%s", trustDomain, s.ns, marker)
	start, cpu, ok := r.change(ctx, phasePolicy, g, func(ctx context.Context) error {
		return r.mesh.admitPrincipal(ctx, s, principal, &r.undo)
	})
	if !ok {
		return
	}
	_, _, _, needle, _ := r.f.goalTimes(start, func(p *fleetProxy) bool { return affected[p] })
	slices.Sort(needle)
	r.res.policyP99, r.res.policyCPU = loadgen.Quantile(needle, 0.99), cpu
	for _, p := range r.f.present() {
		p.mu.Lock()
		if p.ldsAt.After(start) {
			r.res.policyPushed++
		}
		p.mu.Unlock()
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
