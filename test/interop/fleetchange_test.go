package interop

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The changes a round makes to the mesh, each as the cluster's own
// controllers and kubelets would write it, and each with its undo, which
// the round runs once its control plane is stopped, so that every round
// starts from the same objects.

// undoList collects what restores the mesh, run last first.
type undoList []func(context.Context) error

func (u *undoList) add(f func(context.Context) error) { *u = append(*u, f) }

func (u undoList) run(ctx context.Context) error {
	for _, f := range slices.Backward(u) {
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}

// replacePod moves one endpoint of s: the new pod repl, with another
// address, starts and is Ready, the EndpointSlice names it instead of pod
// i, and pod i is deleted (its sidecar, if simulated, stops with it:
// depart).
func (m *fleetMesh) replacePod(ctx context.Context, s *fleetService, i int, repl *fleetPod, depart func(string), undo *undoList) error {
	old := s.pods[i]
	if err := m.swapPod(ctx, s, i, repl, depart); err != nil {
		return err
	}
	undo.add(func(ctx context.Context) error {
		back := *old
		return m.swapPod(ctx, s, i, &back, nil)
	})
	return nil
}

// swapPod makes repl the i-th pod of s, in the order a rollout writes it.
func (m *fleetMesh) swapPod(ctx context.Context, s *fleetService, i int, repl *fleetPod, depart func(string)) error {
	old := s.pods[i]
	if err := m.createPod(ctx, repl); err != nil {
		return err
	}
	s.pods[i] = repl
	if err := m.updateSlice(ctx, s); err != nil {
		return err
	}
	if depart != nil {
		depart(old.name)
	}
	return m.deletePod(ctx, old)
}

// burst replaces pod i of each of services by the pod of repls at the
// same index, the changes started at even intervals over spread.
func (m *fleetMesh) burst(ctx context.Context, services []*fleetService, i int, repls []*fleetPod, spread time.Duration,
	depart func(string), undo *undoList) error {
	start := time.Now()
	undos := make([]undoList, len(services))
	g, gctx := errgroup.WithContext(ctx)
	for k, s := range services {
		at := start.Add(spread * time.Duration(k) / time.Duration(len(services)))
		g.Go(func() error {
			time.Sleep(time.Until(at))
			return m.replacePod(gctx, s, i, repls[k], depart, &undos[k])
		})
	}
	err := g.Wait()
	for _, u := range undos {
		*undo = append(*undo, u...)
	}
	return err
}

// plannedService is a service not yet created, with two pods of new
// addresses, running as the namespace's default service account.
func (m *fleetMesh) plannedService(name, ns string) *fleetService {
	s := &fleetService{name: name, ns: ns}
	for j := range s.pods {
		m.nextIP++
		s.pods[j] = &fleetPod{name: fmt.Sprintf("%s-%c", name, 'a'+j), ns: ns, sa: "default", app: name, ip: fleetIP(m.nextIP)}
	}
	return s
}

// addService creates the planned service s with its two pods and
// EndpointSlice: the Service first, as `kubectl apply` of a Deployment and
// its Service writes it, then the pods once running, then the slice
// naming them.
func (m *fleetMesh) addService(ctx context.Context, s *fleetService, undo *undoList) error {
	name, ns := s.name, s.ns
	undo.add(func(ctx context.Context) error {
		for _, p := range s.pods {
			if err := m.deletePod(ctx, p); err != nil {
				return err
			}
		}
		if err := m.kube.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.slice().Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete endpoint slice of %s: %w", name, err)
		}
		return m.kube.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if _, err := m.kube.CoreV1().Services(ns).Create(ctx, serviceObject(s), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	for _, p := range s.pods {
		if err := m.createPod(ctx, p); err != nil {
			return err
		}
	}
	if _, err := m.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, s.slice(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpoint slice of %s: %w", name, err)
	}
	return nil
}

// admitPrincipal adds principal to the sources the AuthorizationPolicy of
// s admits.
func (m *fleetMesh) admitPrincipal(ctx context.Context, s *fleetService, principal string, undo *undoList) error {
	policies := m.istio.SecurityV1().AuthorizationPolicies(s.ns)
	ap, err := policies.Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get authorization policy of %s: %w", s.name, err)
	}
	before := ap.Spec.Rules[0].From[0].Source.Principals
	ap.Spec.Rules[0].From[0].Source.Principals = append(slices.Clone(before), principal)
	if _, err := policies.Update(ctx, ap, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update authorization policy of %s: %w", s.name, err)
	}
	undo.add(func(ctx context.Context) error {
		ap, err := policies.Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ap.Spec.Rules[0].From[0].Source.Principals = before
		_, err = policies.Update(ctx, ap, metav1.UpdateOptions{})
		return err
	})
	return nil
}
