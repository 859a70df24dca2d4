package interop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Envoy's backoff between two attempts at its ADS stream (GrpcStream's
// RetryInitialDelayMs and RetryMaxDelayMs), with full jitter.
const (
	envoyRetryBase = 500 * time.Millisecond
	envoyRetryMax  = 30 * time.Second
)

// fleetEnvoys is a fleet of simulated Envoy sidecars, each on its own
// plaintext gRPC connection with one Delta ADS stream.
type fleetEnvoys struct {
	addr    string
	names   *fleetNames
	goal    atomic.Pointer[fleetGoal]
	proxies []*fleetProxy
	wg      sync.WaitGroup

	refused atomic.Int64 // streams the control plane refused (ResourceExhausted)
	errMu   sync.Mutex
	errs    map[string]int // other stream endings, by code
}

// fleetProxy is one simulated sidecar: the pod it runs in, its channel,
// and what it holds.
type fleetProxy struct {
	pod    *fleetPod
	node   *core.Node
	detail bool
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	gone   atomic.Bool // its pod was deleted: it stopped, and is no longer measured

	mu         sync.Mutex
	s          proxyState
	prog       goalProgress
	streamAt   time.Time // when the current stream opened
	readyAt    time.Time // first full configuration
	readyAfter time.Duration
	readyBytes int64
	ldsAt      time.Time // last listener response
	respAt     time.Time // last response of any type
	streams    int
}

var adsDeltaStream = &grpc.StreamDesc{StreamName: "DeltaAggregatedResources", ServerStreams: true, ClientStreams: true}

const adsDeltaMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

func newFleetEnvoys(addr string, pods []*fleetPod, samples map[string]bool, cp fleetNodeInfo) (*fleetEnvoys, error) {
	f := &fleetEnvoys{addr: addr, names: &fleetNames{}, errs: map[string]int{}}
	f.goal.Store(&fleetGoal{})
	for _, pod := range pods {
		conn, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.WaitForReady(true), grpc.ForceCodecV2(fleetCodec{}),
				grpc.MaxCallRecvMsgSize(1<<30)),
			// Envoy's HTTP/2 windows are 256 MiB by default: it never
			// holds back a control plane's pushes. Large fixed windows do
			// the same here without reserving memory.
			grpc.WithInitialWindowSize(16<<20), grpc.WithInitialConnWindowSize(16<<20),
			grpc.WithWriteBufferSize(4<<10), grpc.WithSharedWriteBuffer(true))
		if err != nil {
			f.closeConns()
			return nil, fmt.Errorf("fleet: channel: %w", err)
		}
		f.proxies = append(f.proxies, &fleetProxy{pod: pod, node: cp.node(pod), detail: samples[pod.name], conn: conn})
	}
	return f, nil
}

// start opens every proxy's stream at once, as sidecars do when a control
// plane comes up under a running mesh.
func (f *fleetEnvoys) start(ctx context.Context) {
	for _, p := range f.proxies {
		pctx, cancel := context.WithCancel(ctx)
		p.cancel = cancel
		f.wg.Go(func() { f.run(pctx, p) })
	}
}

// run keeps p's stream open until ctx ends, retrying as Envoy does.
func (f *fleetEnvoys) run(ctx context.Context, p *fleetProxy) {
	backoff := envoyRetryBase
	for {
		answered, err := f.session(ctx, p)
		if ctx.Err() != nil {
			return
		}
		if isRefused(err) {
			f.refused.Add(1)
		} else {
			f.errMu.Lock()
			f.errs[status.Code(err).String()]++
			f.errMu.Unlock()
		}
		if answered {
			backoff = envoyRetryBase
		}
		wait := rand.N(backoff) + time.Millisecond
		backoff = min(2*backoff, envoyRetryMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func isRefused(err error) bool { return status.Code(err) == codes.ResourceExhausted }

// session is one Delta ADS stream in Envoy's order: CDS (wildcard) first;
// EDS for every EDS cluster; LDS (wildcard) once those have endpoints;
// RDS for every route name the listeners use; every response ACKed, and
// EDS and RDS resubscribed as clusters and listeners come and go.
// answered reports whether the control plane answered at all.
func (f *fleetEnvoys) session(ctx context.Context, p *fleetProxy) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.conn.NewStream(ctx, adsDeltaStream, adsDeltaMethod)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	p.s = newProxyState()
	p.prog.seq = -1
	p.streamAt = time.Now()
	p.streams++
	p.mu.Unlock()
	if err := st.SendMsg(&discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: fleetCDS}); err != nil {
		return false, streamEnd(st, err)
	}
	for {
		resp := &fleetResponse{names: f.names, goals: &f.goal, keepAddrs: p.detail}
		if err := st.RecvMsg(resp); err != nil {
			return answered, err
		}
		answered = true
		for _, req := range p.apply(resp, f.goal.Load(), resp.goal, time.Now()) {
			if err := st.SendMsg(req); err != nil {
				return answered, streamEnd(st, err)
			}
		}
	}
}

// streamEnd is the status that ended a stream whose SendMsg failed:
// SendMsg reports only io.EOF, RecvMsg the server's status.
func streamEnd(st grpc.ClientStream, err error) error {
	for {
		if rerr := st.RecvMsg(&fleetResponse{names: &fleetNames{}}); rerr != nil {
			return rerr
		}
	}
}

// install makes g the goal of every proxy, numbered after the one before.
func (f *fleetEnvoys) install(g *fleetGoal) {
	g.seq = f.goal.Load().seq + 1
	f.goal.Store(g)
	now := time.Now()
	for _, p := range f.proxies {
		p.mu.Lock()
		p.resetProgress(g, now)
		p.mu.Unlock()
	}
}

// waitGoal waits until every proxy still present has met the goal in
// force, and reports whether they did before the timeout.
func (f *fleetEnvoys) waitGoal(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if f.unmet() == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fleetEnvoys) unmet() int {
	g := f.goal.Load()
	n := 0
	for _, p := range f.present() {
		p.mu.Lock()
		if p.prog.seq != g.seq || p.prog.metAt.IsZero() {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// present is the proxies whose pods still exist.
func (f *fleetEnvoys) present() []*fleetProxy {
	return slices.DeleteFunc(slices.Clone(f.proxies), func(p *fleetProxy) bool { return p.gone.Load() })
}

// depart stops the proxy of a pod about to be deleted, as its Envoy dies
// with it.
func (f *fleetEnvoys) depart(podName string) {
	for _, p := range f.proxies {
		if p.pod.name == podName && !p.gone.Swap(true) {
			p.cancel()
		}
	}
}

// progress describes the fleet for a log line or a timeout.
func (f *fleetEnvoys) progress() string {
	g := f.goal.Load()
	var b strings.Builder
	unmet, shown := 0, 0
	for _, p := range f.present() {
		p.mu.Lock()
		if p.prog.seq != g.seq || p.prog.metAt.IsZero() {
			unmet++
			if shown < 3 {
				shown++
				fmt.Fprintf(&b, "; %s: streams %d, clusters %d, eds pending %d/%d, goal eds %d/%d, listeners %d, routes pending %d/%d, cluster %v, needle %v",
					p.pod.name, p.streams, len(p.s.clusters), p.s.pendingEDS, len(p.s.eds), p.prog.edsOK, len(g.eds),
					len(p.s.listeners), p.s.pendingRDS, len(p.s.routes), !p.prog.clusterAt.IsZero(), !p.prog.needleAt.IsZero())
			}
		}
		p.mu.Unlock()
	}
	return fmt.Sprintf("%d of %d proxies not there, %d streams refused, other stream ends %v%s",
		unmet, len(f.present()), f.refused.Load(), f.errCounts(), b.String())
}

func (f *fleetEnvoys) errCounts() map[string]int {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return maps.Clone(f.errs)
}

// stop ends every stream and closes every connection.
func (f *fleetEnvoys) stop() {
	for _, p := range f.proxies {
		if p.cancel != nil {
			p.cancel()
		}
	}
	f.wg.Wait()
	f.closeConns()
}

func (f *fleetEnvoys) closeConns() {
	for _, p := range f.proxies {
		p.conn.Close()
	}
}

// goalTimes returns, for the proxies present (and for which pick is
// true), how long after start each met the goal in force, reached its
// endpoints, its cluster and its needle (zero where not reached).
func (f *fleetEnvoys) goalTimes(start time.Time, pick func(*fleetProxy) bool) (met, eds, cluster, needle []time.Duration, err error) {
	g := f.goal.Load()
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return max(0, t.Sub(start))
	}
	for _, p := range f.present() {
		if pick != nil && !pick(p) {
			continue
		}
		p.mu.Lock()
		pr := p.prog
		p.mu.Unlock()
		if pr.seq != g.seq || pr.metAt.IsZero() {
			err = errors.New("goal not met by every proxy")
		}
		met = append(met, since(pr.metAt))
		eds = append(eds, since(pr.edsAt))
		cluster = append(cluster, since(pr.clusterAt))
		needle = append(needle, since(pr.needleAt))
	}
	return met, eds, cluster, needle, err
}
