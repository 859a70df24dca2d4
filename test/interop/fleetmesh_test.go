package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// The fleet's mesh on the apiserver: M Services (HTTP port 80 to 8080),
// each with two running pods and the EndpointSlice the EndpointSlice
// controller would write for them, one ALLOW AuthorizationPolicy per
// Service, and STRICT mTLS mesh-wide by one PeerAuthentication in the root
// namespace, which is the control planes' namespace.
const (
	fleetPort       = 80
	fleetTargetPort = 8080
	fleetNSSize     = 100 // services per namespace
	fleetWriters    = 16  // concurrent API writes while building the mesh
)

type fleetPod struct {
	name, ns, sa, app, ip string
	uid                   types.UID
}

func (p *fleetPod) labels() map[string]string {
	return map[string]string{
		"app": p.app, "version": "v1", "security.istio.io/tlsMode": "istio",
		"service.istio.io/canonical-name": p.app, "service.istio.io/canonical-revision": "v1",
	}
}

type fleetService struct {
	name, ns string
	pods     [2]*fleetPod
}

func (s *fleetService) host() string    { return s.name + "." + s.ns + ".svc.cluster.local" }
func (s *fleetService) cluster() string { return fmt.Sprintf("outbound|%d||%s", fleetPort, s.host()) }

// fingerprint is that of the endpoints the service's cluster must have.
func (s *fleetService) fingerprint() uint64 { return mergedFingerprint(s) }

// mergedFingerprint is that of the endpoints of services of one hostname
// in several clusters, which a proxy gets in one cluster.
func mergedFingerprint(services ...*fleetService) uint64 {
	var addrs []string
	for _, s := range services {
		for _, p := range s.pods {
			addrs = append(addrs, fmt.Sprintf("%s:%d", p.ip, fleetTargetPort))
		}
	}
	return endpointsFingerprint(addrs)
}

type fleetMesh struct {
	kube       kubernetes.Interface
	istio      versioned.Interface
	root       string // the control planes' namespace and the mesh's root namespace
	namespaces []string
	services   []*fleetService
	nextIP     int
}

// fleetPlace is where a mesh is created: the control planes' namespace,
// the namespaces of the services in turn, and the number of the first pod
// address (fleetIP), so that the meshes of several clusters have the same
// names and addresses of their own. A mesh on an API server of its own
// (private) goes with it and is not deleted.
type fleetPlace struct {
	root       string
	namespaces []string
	ipBase     int
	private    bool
}

// newFleetMesh creates the mesh of m services on env, in namespaces of
// its own, and deletes it when b ends.
func newFleetMesh(b *testing.B, env *testenv.Env, m int) *fleetMesh {
	b.Helper()
	place := fleetPlace{root: env.Namespace(b)}
	for range min(max(m/fleetNSSize, 1), 10) {
		place.namespaces = append(place.namespaces, env.Namespace(b))
	}
	return newFleetMeshAt(b, env, m, place)
}

// newFleetMeshAt creates the mesh of m services on env at place, whose
// namespaces exist.
func newFleetMeshAt(b *testing.B, env *testenv.Env, m int, place fleetPlace) *fleetMesh {
	b.Helper()
	crds := chartCRDs(b)
	routing, err := istioRoutingCRDs() // the VirtualServices of fleetrules_test.go
	if err != nil {
		b.Fatal(err)
	}
	env.InstallCRDs(b, append(crds, routing)...)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	mesh := &fleetMesh{kube: kubernetes.NewForConfigOrDie(cfg), istio: versioned.NewForConfigOrDie(cfg),
		root: place.root, namespaces: place.namespaces, nextIP: 1<<20 + place.ipBase}
	if !place.private {
		b.Cleanup(func() { mesh.delete(b) })
	}
	for i := range m {
		s := &fleetService{name: fmt.Sprintf("svc-%d", i), ns: mesh.namespaces[i%len(mesh.namespaces)]}
		for j := range s.pods {
			s.pods[j] = &fleetPod{name: fmt.Sprintf("%s-%c", s.name, 'a'+j), ns: s.ns, sa: s.name, app: s.name,
				ip: fleetIP(place.ipBase + 1 + 2*i + j)}
		}
		mesh.services = append(mesh.services, s)
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err = mesh.istio.SecurityV1().PeerAuthentications(mesh.root).Create(ctx, &securityv1.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: mesh.root},
		Spec: securityv1beta1.PeerAuthentication{Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{
			Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatalf("create mesh-wide PeerAuthentication: %v", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fleetWriters)
	for i, s := range mesh.services {
		g.Go(func() error { return mesh.createService(gctx, s, mesh.services[(i+1)%m]) })
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("create the mesh: %v", err)
	}
	fleetNote("mesh of %d services, %d pods in %d namespaces created in %s", m, 2*m, len(mesh.namespaces),
		time.Since(start).Round(time.Millisecond))
	return mesh
}

// fleetIP is the k-th pod address, in 10.64.0.0/10: outside the
// apiserver's service range, and not loopback, which EndpointSlices refuse.
func fleetIP(k int) string {
	return fmt.Sprintf("10.%d.%d.%d", 64+k>>16, k>>8&0xff, k&0xff)
}

// newPod is a pod that takes the place of p under another name and IP.
func (m *fleetMesh) newPod(p *fleetPod, tag string) *fleetPod {
	m.nextIP++
	return &fleetPod{name: p.app + "-" + tag, ns: p.ns, sa: p.sa, app: p.app, ip: fleetIP(m.nextIP)}
}

// createService creates s's service account, pods, Service, EndpointSlice
// and its AuthorizationPolicy, which admits the service account of caller.
func (m *fleetMesh) createService(ctx context.Context, s, caller *fleetService) error {
	_, err := m.kube.CoreV1().ServiceAccounts(s.ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: s.name}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create service account %s/%s: %w", s.ns, s.name, err)
	}
	for _, p := range s.pods {
		if err := m.createPod(ctx, p); err != nil {
			return err
		}
	}
	if err := m.createServiceObjects(ctx, s); err != nil {
		return err
	}
	_, err = m.istio.SecurityV1().AuthorizationPolicies(s.ns).Create(ctx, &securityv1.AuthorizationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns},
		Spec: securityv1beta1.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": s.name}},
			Action:   securityv1beta1.AuthorizationPolicy_ALLOW,
			Rules: []*securityv1beta1.Rule{{From: []*securityv1beta1.Rule_From{{Source: &securityv1beta1.Source{
				Principals: []string{fmt.Sprintf("%s/ns/%s/sa/%s", trustDomain, caller.ns, caller.name)},
			}}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create authorization policy %s/%s: %w", s.ns, s.name, err)
	}
	return nil
}

// createServiceObjects creates the Service and its EndpointSlice.
func (m *fleetMesh) createServiceObjects(ctx context.Context, s *fleetService) error {
	if _, err := m.kube.CoreV1().Services(s.ns).Create(ctx, serviceObject(s), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s/%s: %w", s.ns, s.name, err)
	}
	if _, err := m.kube.DiscoveryV1().EndpointSlices(s.ns).Create(ctx, s.slice(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpoint slice of %s/%s: %w", s.ns, s.name, err)
	}
	return nil
}

func serviceObject(s *fleetService) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns, Labels: map[string]string{"app": s.name}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": s.name},
			Ports: []corev1.ServicePort{{Name: "http", Port: fleetPort, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(fleetTargetPort)}},
		},
	}
}

// slice is the EndpointSlice the controller would keep for s's pods.
func (s *fleetService) slice() *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.name + "-fleet", Namespace: s.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: s.name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(fleetTargetPort)),
			Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, p := range s.pods {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.ns, Name: p.name, UID: p.uid},
		})
	}
	return es
}

// updateSlice writes s's EndpointSlice for its current pods.
func (m *fleetMesh) updateSlice(ctx context.Context, s *fleetService) error {
	if _, err := m.kube.DiscoveryV1().EndpointSlices(s.ns).Update(ctx, s.slice(), metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update endpoint slice of %s/%s: %w", s.ns, s.name, err)
	}
	return nil
}

// createPod creates p and writes the status a kubelet would once its
// containers run: Running, Ready, with p's address.
func (m *fleetMesh) createPod(ctx context.Context, p *fleetPod) error {
	pods := m.kube.CoreV1().Pods(p.ns)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: p.labels()},
		Spec: corev1.PodSpec{
			ServiceAccountName: p.sa,
			Containers: []corev1.Container{{Name: "app", Image: "app",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: fleetTargetPort, Protocol: corev1.ProtocolTCP}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", p.ns, p.name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: p.ip, PodIPs: []corev1.PodIP{{IP: p.ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status of pod %s/%s: %w", p.ns, p.name, err)
	}
	p.uid = pod.UID
	return nil
}

func (m *fleetMesh) deletePod(ctx context.Context, p *fleetPod) error {
	if err := m.kube.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", p.ns, p.name, err)
	}
	return nil
}

// proxyPods are the pods with a simulated sidecar, n of them: each
// service's first pod, then each one's second, so that with n at most the
// number of services the second pods, whose endpoints the benchmark
// moves, carry none.
func (m *fleetMesh) proxyPods(n int) []*fleetPod {
	var out []*fleetPod
	for j := range 2 {
		for _, s := range m.services {
			if len(out) < n {
				out = append(out, s.pods[j])
			}
		}
	}
	return out
}

// expected is the endpoints every proxy's outbound clusters must have.
func (m *fleetMesh) expected() map[string]uint64 {
	out := make(map[string]uint64, len(m.services))
	for _, s := range m.services {
		out[s.cluster()] = s.fingerprint()
	}
	return out
}

// delete removes what the mesh created: without a namespace controller,
// deleting a namespace would leave its objects, and the next size's
// control planes would read them.
func (m *fleetMesh) delete(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	all := metav1.ListOptions{}
	now := metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}
	for _, ns := range append([]string{m.root}, m.namespaces...) {
		for what, del := range map[string]func() error{
			"pods":      func() error { return m.kube.CoreV1().Pods(ns).DeleteCollection(ctx, now, all) },
			"slices":    func() error { return m.kube.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, now, all) },
			"policies":  func() error { return m.istio.SecurityV1().AuthorizationPolicies(ns).DeleteCollection(ctx, now, all) },
			"peerauthn": func() error { return m.istio.SecurityV1().PeerAuthentications(ns).DeleteCollection(ctx, now, all) },
			"services":  func() error { return m.deleteServices(ctx, ns) },
		} {
			if err := del(); err != nil {
				b.Errorf("delete the fleet's %s in %s: %v", what, ns, err)
			}
		}
	}
}

// deleteServices deletes the Services of ns one by one: they have no
// DeleteCollection.
func (m *fleetMesh) deleteServices(ctx context.Context, ns string) error {
	list, err := m.kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fleetWriters)
	for _, svc := range list.Items {
		g.Go(func() error { return m.kube.CoreV1().Services(ns).Delete(gctx, svc.Name, metav1.DeleteOptions{}) })
	}
	return g.Wait()
}

// fleetNote prints a line of progress to the output make bench keeps,
// indented so that benchstat reads it as neither a result nor a
// configuration line.
func fleetNote(format string, args ...any) {
	benchNote("  "+format+"\n", args...)
}
