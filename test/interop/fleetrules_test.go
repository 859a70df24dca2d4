package interop

import (
	"context"
	"fmt"
	"slices"
	"time"

	networkingapi "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/loadgen"
)

// The rule changes of a round: a VirtualService that one namespace alone
// sees, one that every proxy sees, and a DestinationRule every proxy
// sees. Each reports the p99 of the proxies it concerns and how many
// proxies were sent anything.

const (
	phaseVS     = "virtual service"
	phaseMeshVS = "mesh virtual service"
	phaseDR     = "destination rule"
)

// virtualService routes the second service's host for its own namespace
// (exportTo ".") with a route named by a marker: the sidecars of that
// namespace must receive a route configuration naming it; the others see
// nothing of it, and need nothing sent.
func (r *fleetRun) virtualService(ctx context.Context) {
	s := r.mesh.services[1%len(r.mesh.services)]
	marker := fmt.Sprintf("fleet-vs-%s-%d", r.kind, r.round)
	affected := map[*fleetProxy]bool{}
	for _, p := range r.f.present() {
		if p.pod.ns == s.ns {
			affected[p] = true
		}
	}
	g := &fleetGoal{needle: []byte(marker), needleFor: affected}
	start, cpu, ok := r.change(ctx, phaseVS, g, func(ctx context.Context) error {
		return r.mesh.createVirtualService(ctx, s, marker, []string{"."}, &r.undo)
	})
	r.res.vsAffected = len(affected)
	if !ok {
		return
	}
	_, _, _, needle, _ := r.f.goalTimes(start, func(p *fleetProxy) bool { return affected[p] })
	slices.Sort(needle)
	r.res.vsP99, r.res.vsCPU, r.res.vsPushed = loadgen.Quantile(needle, 0.99), cpu, r.f.sentSince(start)
}

// meshVirtualService routes the fourth service's host for every
// namespace (exportTo "*") with a route named by a marker: every sidecar
// must receive a route configuration naming it.
func (r *fleetRun) meshVirtualService(ctx context.Context) {
	s := r.mesh.services[3%len(r.mesh.services)]
	marker := fmt.Sprintf("fleet-meshvs-%s-%d", r.kind, r.round)
	present := r.f.present()
	g := &fleetGoal{needle: []byte(marker)}
	start, cpu, ok := r.change(ctx, phaseMeshVS, g, func(ctx context.Context) error {
		return r.mesh.createVirtualService(ctx, s, marker, []string{"*"}, &r.undo)
	})
	r.res.meshVSAffected = len(present)
	if !ok {
		return
	}
	_, _, _, needle, _ := r.f.goalTimes(start, nil)
	slices.Sort(needle)
	r.res.meshVSP50, r.res.meshVSP99 = loadgen.Quantile(needle, 0.5), loadgen.Quantile(needle, 0.99)
	r.res.meshVSCPU, r.res.meshVSPushed = cpu, r.f.sentSince(start)
}

// destinationRule adds a subset to the third service: every proxy must
// receive its cluster.
func (r *fleetRun) destinationRule(ctx context.Context) {
	s := r.mesh.services[2%len(r.mesh.services)]
	subset := fmt.Sprintf("fleet-%s-%d", r.kind, r.round)
	g := &fleetGoal{cluster: fmt.Sprintf("outbound|%d|%s|%s", fleetPort, subset, s.host())}
	start, cpu, ok := r.change(ctx, phaseDR, g, func(ctx context.Context) error {
		return r.mesh.createDestinationRule(ctx, s, subset, &r.undo)
	})
	if !ok {
		return
	}
	_, _, cluster, _, _ := r.f.goalTimes(start, nil)
	slices.Sort(cluster)
	r.res.drP99, r.res.drCPU, r.res.drPushed = loadgen.Quantile(cluster, 0.99), cpu, r.f.sentSince(start)
}

// sentSince counts the proxies sent a response of any type since t.
func (f *fleetEnvoys) sentSince(t time.Time) int {
	n := 0
	for _, p := range f.present() {
		p.mu.Lock()
		if p.respAt.After(t) {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// createVirtualService creates a VirtualService of s's namespace,
// exported to exportTo, routing s's host to s by a rule named name.
func (m *fleetMesh) createVirtualService(ctx context.Context, s *fleetService, name string, exportTo []string, undo *undoList) error {
	vss := m.istio.NetworkingV1().VirtualServices(s.ns)
	_, err := vss.Create(ctx, &istionetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: networkingapi.VirtualService{
			Hosts:    []string{s.host()},
			ExportTo: exportTo,
			Http: []*networkingapi.HTTPRoute{{
				Name:  name,
				Route: []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{Host: s.host()}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create virtual service %s/%s: %w", s.ns, name, err)
	}
	undo.add(func(ctx context.Context) error { return vss.Delete(ctx, name, metav1.DeleteOptions{}) })
	return nil
}

// createDestinationRule creates a DestinationRule for s's host with one
// subset, subset, of every pod of s.
func (m *fleetMesh) createDestinationRule(ctx context.Context, s *fleetService, subset string, undo *undoList) error {
	drs := m.istio.NetworkingV1().DestinationRules(s.ns)
	_, err := drs.Create(ctx, &istionetworkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: subset, Namespace: s.ns},
		Spec: networkingapi.DestinationRule{Host: s.host(), Subsets: []*networkingapi.Subset{
			{Name: subset, Labels: map[string]string{"app": s.name}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create destination rule %s/%s: %w", s.ns, subset, err)
	}
	undo.add(func(ctx context.Context) error { return drs.Delete(ctx, subset, metav1.DeleteOptions{}) })
	return nil
}
