package kubesource

import (
	"testing"
	"time"

	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

const echoHost = "echo.app.svc.cluster.local"

func echoService() *corev1.Service {
	return newService("app", "echo", map[string]string{"app": "echo"}, servicePort("grpc", 8080, intstr.FromInt32(9000)))
}

func echoPod(name, ip string) *corev1.Pod {
	return newPod("app", name, "echo", ip, map[string]string{"app": "echo", model.TLSModeLabel: "istio"})
}

func grpcSlice(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return newSlice("app", name, "echo", map[string]int32{"grpc": 9000}, eps...)
}

// endpoints builds objs and returns the endpoints of echo's port 8080.
func endpoints(t *testing.T, objs ...any) []model.Endpoint {
	t.Helper()
	svc := build(cacheListers(t, objs...), model.Options{}).Service(echoHost)
	if svc == nil {
		t.Fatal("no echo service")
	}
	return svc.Endpoints[8080]
}

func addresses(eps []model.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Address)
	}
	return out
}

func TestEndpointSelection(t *testing.T) {
	notReady := podEndpoint("app", "b", "10.0.0.2")
	notReady.Conditions.Ready = ptr.To(false)
	terminating := podEndpoint("app", "b", "10.0.0.2")
	terminating.Conditions = discoveryv1.EndpointConditions{Terminating: ptr.To(true)}
	readyUnset := podEndpoint("app", "b", "10.0.0.2")
	readyUnset.Conditions = discoveryv1.EndpointConditions{}
	otherNamespace := podEndpoint("other", "b", "10.0.0.2")
	staleUID := podEndpoint("app", "b", "10.0.0.2")
	staleUID.TargetRef.UID = "uid-of-an-earlier-pod"
	noRef := podEndpoint("app", "", "10.0.0.9")
	noRef.TargetRef = nil
	tests := map[string]struct {
		objs []any
		want []string
	}{
		"a service without slices has no endpoints": {objs: []any{echoService(), echoPod("a", "10.0.0.1")}},
		"a ready endpoint of a known pod counts": {
			objs: []any{echoService(), echoPod("a", "10.0.0.1"), grpcSlice("s", podEndpoint("app", "a", "10.0.0.1"))},
			want: []string{"10.0.0.1"},
		},
		"an endpoint whose ready condition is unset counts": {
			objs: []any{echoService(), echoPod("b", "10.0.0.2"), grpcSlice("s", readyUnset)},
			want: []string{"10.0.0.2"},
		},
		"a not ready endpoint is left out": {objs: []any{echoService(), echoPod("b", "10.0.0.2"), grpcSlice("s", notReady)}},
		"a terminating endpoint is left out": {
			objs: []any{echoService(), echoPod("b", "10.0.0.2"), grpcSlice("s", terminating)},
		},
		"an endpoint whose pod is not known yet is left out": {
			objs: []any{echoService(), grpcSlice("s", podEndpoint("app", "a", "10.0.0.1"))},
		},
		"an endpoint naming a pod of another namespace is left out": {
			objs: []any{echoService(), newPod("other", "b", "x", "10.0.0.2", nil), grpcSlice("s", otherNamespace)},
		},
		"an endpoint naming an earlier pod of the same name is left out": {
			objs: []any{echoService(), echoPod("b", "10.0.0.2"), grpcSlice("s", staleUID)},
		},
		"an endpoint without a pod reference counts": {
			objs: []any{echoService(), grpcSlice("s", noRef)},
			want: []string{"10.0.0.9"},
		},
		"an address in two slices counts once": {
			objs: []any{echoService(), echoPod("a", "10.0.0.1"),
				grpcSlice("s1", podEndpoint("app", "a", "10.0.0.1")), grpcSlice("s2", podEndpoint("app", "a", "10.0.0.1"))},
			want: []string{"10.0.0.1"},
		},
		"a slice of another service does not count": {
			objs: []any{echoService(), echoPod("a", "10.0.0.1"),
				newSlice("app", "s", "other", map[string]int32{"grpc": 9000}, podEndpoint("app", "a", "10.0.0.1"))},
		},
		"a slice without the port's name does not count": {
			objs: []any{echoService(), echoPod("a", "10.0.0.1"),
				newSlice("app", "s", "echo", map[string]int32{"http": 9000}, podEndpoint("app", "a", "10.0.0.1"))},
		},
		"endpoints are sorted by address": {
			objs: []any{echoService(), echoPod("a", "10.0.0.1"), echoPod("b", "10.0.0.2"),
				grpcSlice("s", podEndpoint("app", "b", "10.0.0.2"), podEndpoint("app", "a", "10.0.0.1"))},
			want: []string{"10.0.0.1", "10.0.0.2"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := addresses(endpoints(t, tc.objs...))
			if len(got) != len(tc.want) {
				t.Fatalf("endpoints %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("endpoints %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestEndpointIdentity(t *testing.T) {
	zone := podEndpoint("app", "a", "10.0.0.1")
	zone.Zone = ptr.To("zone-a")
	noRef := podEndpoint("app", "", "10.0.0.2")
	noRef.TargetRef = nil
	stranger := podEndpoint("app", "", "10.0.0.3")
	stranger.TargetRef = nil
	located := echoPod("b", "10.0.0.2")
	located.Labels["istio-locality"] = "region.zone.sub"
	eps := endpoints(t, echoService(), echoPod("a", "10.0.0.1"), located, grpcSlice("s", zone, noRef, stranger))
	if len(eps) != 3 {
		t.Fatalf("endpoints %+v", eps)
	}
	a, byIP, unknown := eps[0], eps[1], eps[2]
	if a.Port != 9000 || a.ServiceAccount != "echo" || a.Namespace != "app" || a.TLSMode() != "istio" ||
		a.Locality != "/zone-a" || a.Weight != 1 {
		t.Errorf("pod endpoint %+v", a)
	}
	if byIP.ServiceAccount != "echo" || byIP.Locality != "region/zone/sub" || byIP.TLSMode() != "istio" {
		t.Errorf("endpoint found by IP %+v", byIP)
	}
	if unknown.ServiceAccount != "" || len(unknown.Labels) != 0 || unknown.Namespace != "app" {
		t.Errorf("endpoint without a pod %+v", unknown)
	}
}

func TestServicePorts(t *testing.T) {
	svc := newService("app", "echo", nil,
		servicePort("grpc", 8080, intstr.FromInt32(9000)),
		servicePort("http", 80, intstr.FromString("web")),
		servicePort("bad", 70000, intstr.FromInt32(1)),
		servicePort("plain", 81, intstr.IntOrString{}))
	svc.Spec.Ports[0].AppProtocol = ptr.To("grpc")
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	got := build(cacheListers(t, svc), model.Options{}).Service(echoHost)
	if got == nil || len(got.Ports) != 3 {
		t.Fatalf("service %+v", got)
	}
	want := []model.Port{
		{Name: "grpc", Port: 8080, TargetPort: 9000, Protocol: "grpc"},
		{Name: "http", Port: 80, TargetPortName: "web", Protocol: "TCP"},
		{Name: "plain", Port: 81, Protocol: "TCP"},
	}
	for i := range want {
		if got.Ports[i] != want[i] {
			t.Errorf("port %d: %+v, want %+v", i, got.Ports[i], want[i])
		}
	}
}

func TestSnapshotSharesNothingWithTheCache(t *testing.T) {
	pod := echoPod("a", "10.0.0.1")
	pa := newPeerAuthentication("app", "strict")
	l := cacheListers(t, echoService(), pod, grpcSlice("s", podEndpoint("app", "a", "10.0.0.1")), pa)
	snap := build(l, model.Options{})
	snap.Service(echoHost).Endpoints[8080][0].Labels["app"] = "changed"
	snap.Service(echoHost).Selector["app"] = "changed"
	snap.Resources().PeerAuthentications[0].Spec.Selector = nil
	cached, err := l.pods.Pods("app").Get("a")
	if err != nil || cached.Labels["app"] != "echo" {
		t.Errorf("cached pod changed: %v %v", cached.Labels, err)
	}
	svc, err := l.services.Services("app").Get("echo")
	if err != nil || svc.Spec.Selector["app"] != "echo" {
		t.Errorf("cached service changed: %v %v", svc.Spec.Selector, err)
	}
}

func TestVersion(t *testing.T) {
	base := func() []any {
		return []any{echoService(), echoPod("a", "10.0.0.1"), grpcSlice("s", podEndpoint("app", "a", "10.0.0.1")),
			newPeerAuthentication("app", "pa"), newDestinationRule("app", "dr", "echo")}
	}
	version := func(objs ...any) string { return build(cacheListers(t, objs...), model.Options{}).Version }
	v := version(base()...)
	if again := version(base()...); again != v {
		t.Fatalf("same content, versions %s and %s", v, again)
	}
	annotated := base()
	annotated[0].(*corev1.Service).Annotations = map[string]string{"note": "x"}
	annotated[0].(*corev1.Service).ResourceVersion = "2"
	if got := version(annotated...); got != v {
		t.Errorf("an annotation the model does not read changed the version")
	}
	changes := map[string]func(objs []any){
		"a pod label":          func(o []any) { o[1].(*corev1.Pod).Labels["v"] = "2" },
		"a cluster IP":         func(o []any) { o[0].(*corev1.Service).Spec.ClusterIP = "10.96.0.9" },
		"a service port":       func(o []any) { o[0].(*corev1.Service).Spec.Ports[0].Port = 8081 },
		"a destination rule":   func(o []any) { o[4] = newDestinationRule("app", "dr", "other") },
		"an endpoint address":  func(o []any) { o[2] = grpcSlice("s", podEndpoint("app", "a", "10.0.0.2")) },
		"a policy's namespace": func(o []any) { o[3] = newPeerAuthentication("other", "pa") },
	}
	for name, change := range changes {
		objs := base()
		change(objs)
		if version(objs...) == v {
			t.Errorf("%s changed and the version did not", name)
		}
	}
}

func TestOddShapesDoNotPanic(t *testing.T) {
	empty := &discoveryv1.EndpointSlice{ObjectMeta: objectMeta("app", "empty", map[string]string{discoveryv1.LabelServiceName: "echo"})}
	nilPort := newSlice("app", "nilport", "echo", nil, discoveryv1.Endpoint{})
	nilPort.Ports = []discoveryv1.EndpointPort{{}, {Name: ptr.To("grpc"), Port: ptr.To[int32](-1)}}
	noAddr := grpcSlice("noaddr", discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{Kind: "Pod"}}, discoveryv1.Endpoint{Addresses: []string{""}})
	fqdn := grpcSlice("fqdn", discoveryv1.Endpoint{Addresses: []string{"example.com"}})
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	unlabelled := grpcSlice("unlabelled", podEndpoint("app", "a", "10.0.0.1"))
	unlabelled.Labels = nil
	podNoIP := newPod("app", "noip", "", "", nil)
	objs := []any{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "echo"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "nil-selector"}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}}},
		empty, nilPort, noAddr, fqdn, unlabelled, podNoIP,
		newPeerAuthentication("app", "empty"), newDestinationRule("app", "empty", ""),
	}
	snap := build(cacheListers(t, objs...), model.Options{})
	if snap.Service(echoHost) == nil || len(snap.Service(echoHost).Endpoints) != 0 {
		t.Errorf("echo %+v", snap.Service(echoHost))
	}
	if snap.Version == "" {
		t.Error("no version")
	}
	if _, err := transform("not an object"); err != nil {
		t.Errorf("transform of a foreign value: %v", err)
	}
}

func TestDryRunAuthorizationPoliciesAreLeftOut(t *testing.T) {
	enforced := &istiosecurity.AuthorizationPolicy{ObjectMeta: objectMeta("app", "enforced", nil)}
	dryRun := &istiosecurity.AuthorizationPolicy{ObjectMeta: objectMeta("app", "dry-run", nil)}
	dryRun.Annotations = map[string]string{dryRunAnnotation: "true"}
	got := build(cacheListers(t, enforced, dryRun), model.Options{}).Resources().AuthorizationPolicies
	if len(got) != 1 || got[0].Name != "enforced" {
		t.Fatalf("policies %+v, want only the enforced one", got)
	}
}

func TestPodsAreTheRegistryOfWorkloads(t *testing.T) {
	running := echoPod("a", "10.0.0.1")
	running.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}
	done := echoPod("b", "10.0.0.2")
	done.Status.Phase = corev1.PodSucceeded
	svc := echoService()
	svc.Spec.ClusterIPs = []string{"10.96.0.1", "fd00::a"}
	snap := build(cacheListers(t, svc, running, done), model.Options{})
	if !snap.HasPods() {
		t.Fatal("a snapshot from the registry has no pods")
	}
	p := snap.Pod("app", "a")
	if p == nil || p.ServiceAccount != "echo" || p.Labels["app"] != "echo" || len(p.IPs) != 2 || p.IPs[1] != "fd00::1" {
		t.Fatalf("pod a: %+v", p)
	}
	if snap.Pod("app", "b") != nil {
		t.Error("a pod that has ended is a workload")
	}
	if got := snap.Service(echoHost).Addresses; len(got) != 2 || got[0] != "10.96.0.1" {
		t.Errorf("cluster IPs %v", got)
	}
	if !build(cacheListers(t), model.Options{}).HasPods() {
		t.Error("an empty registry reads as no registry")
	}
}

// TestRebuildsReuseWhatDidNotChange builds twice with one pod replaced in
// between: the second snapshot is what a build from scratch gives, the
// unchanged pod's conversion is reused and the replaced one's is not.
func TestRebuildsReuseWhatDidNotChange(t *testing.T) {
	labels := map[string]string{"app": "echo"}
	l := cacheListers(t,
		newService("app", "echo", labels, servicePort("http", 80, intstr.FromInt32(8080))),
		newPod("app", "echo-1", "echo", "10.0.0.1", labels), newPod("app", "echo-2", "echo", "10.0.0.2", labels),
		newSlice("app", "echo-abcde", "echo", map[string]int32{"http": 8080}, podEndpoint("app", "echo-1", "10.0.0.1"), podEndpoint("app", "echo-2", "10.0.0.2")),
	)
	var r reuse
	first := buildReusing(l, model.Options{}, &r, &touched{})
	moved, err := transform(newPod("app", "echo-2", "echo", "10.0.0.2", map[string]string{"app": "echo", "version": "v2"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.podIndex.Update(moved); err != nil {
		t.Fatal(err)
	}
	var events touched
	events.add(moved)
	second := buildReusing(l, model.Options{}, &r, &events)
	if fresh := build(l, model.Options{}); second.Version != fresh.Version || second.Version == first.Version {
		t.Fatalf("versions: first %s, second %s, from scratch %s", first.Version, second.Version, fresh.Version)
	}
	if first.Pod("app", "echo-1") != second.Pod("app", "echo-1") {
		t.Error("the unchanged pod was converted again")
	}
	if got := second.Pod("app", "echo-2").Labels["version"]; got != "v2" {
		t.Errorf("the replaced pod's labels: version %q", got)
	}
	eps := second.Service("echo.app.svc.cluster.local").Endpoints[80]
	if len(eps) != 2 || eps[1].Labels["version"] != "v2" || eps[0].Labels["version"] != "" {
		t.Errorf("endpoints %+v", eps)
	}
}

// TestPeerAuthenticationsKeepTheirCreationTime: of several policies of one
// scope the oldest applies, so the time is in the model and in the
// version: a policy deleted and created again under its name is another.
func TestPeerAuthenticationsKeepTheirCreationTime(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pa := newPeerAuthentication("app", "default")
	pa.CreationTimestamp = metav1.NewTime(created)
	first := build(cacheListers(t, pa), model.Options{})
	if got := first.Resources().PeerAuthentications[0].Created; !got.Equal(created) {
		t.Fatalf("created %v, want %v", got, created)
	}
	again := pa.DeepCopy()
	again.CreationTimestamp = metav1.NewTime(created.Add(time.Hour))
	if second := build(cacheListers(t, again), model.Options{}); second.Version == first.Version {
		t.Error("a policy created again has the version of the old one")
	}
}
