package interop

import (
	"crypto/sha256"
	"fmt"
	goruntime "runtime"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pilot/test/xdstest"
	istiolog "istio.io/istio/pkg/log"
	"istio.io/istio/pkg/util/sets"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// benchPolicies: namespace-wide STRICT, and an ALLOW policy on the
// benchmarked sidecar's workload.
const benchPolicies = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: bench}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-bench, namespace: bench}
spec:
  selector: {matchLabels: {app: svc-0}}
  rules: [{from: [{source: {namespaces: [bench]}}], to: [{operation: {methods: [GET]}}]}]
`

// benchWorld is n services in namespace bench, each with an HTTP port
// (80 → 8080) and a TCP port (9000), a virtual IP and two sidecar pods.
func benchWorld(n int) []runtime.Object {
	out := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		labels := map[string]string{"app": name, "security.istio.io/tlsMode": "istio"}
		out = append(out, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
			Spec: corev1.ServiceSpec{
				ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
					{Name: "tcp", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolTCP},
				},
			},
		})
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-abc", Namespace: "bench", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{
				{Name: ptrTo("http"), Port: ptrTo(int32(8080)), Protocol: ptrTo(corev1.ProtocolTCP)},
				{Name: ptrTo("tcp"), Port: ptrTo(int32(9000)), Protocol: ptrTo(corev1.ProtocolTCP)},
			},
		}
		for j := range 2 {
			pod := fmt.Sprintf("%s-%d", name, j)
			ip := fmt.Sprintf("10.%d.%d.%d", 1+j, i/250, i%250+1)
			out = append(out, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "bench", Labels: labels},
				Spec:       corev1.PodSpec{ServiceAccountName: name, NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			})
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: "bench"},
			})
		}
		out = append(out, slice)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// BenchmarkSidecarGeneration is a full push (CDS, EDS of every cluster,
// LDS, RDS of every route) for one sidecar, the pod svc-0-0, by Istio's
// generator and by envoygen, on the same Kubernetes objects and policies.
// Istio's XDS cache is cleared before each push, and envoygen starts from
// nothing each time (no resource built before), so both measure the first
// proxy of a model; ours also marshals and hashes every resource, as
// istiod does.
func BenchmarkSidecarGeneration(b *testing.B) {
	for _, n := range []int{100, 1000} {
		objects := benchWorld(n)
		pod := objects[2].(*corev1.Pod) // svc-0-0
		b.Run(fmt.Sprintf("istio/services=%d", n), func(b *testing.B) { benchIstioPush(b, objects, pod, benchPolicies) })
		b.Run(fmt.Sprintf("bulwark/services=%d", n), func(b *testing.B) { benchOurPush(b, objects, pod, benchPolicies) })
	}
}

// benchIstioPush is a full push for pod by Istio's generator over objects
// and the Istio configuration YAML istioYAML, its cache cleared each time.
func benchIstioPush(b *testing.B, objects []runtime.Object, pod *corev1.Pod, istioYAML string) {
	silenceIstioLogs()
	cfgs, _, err := crd.ParseInputs(istioYAML)
	if err != nil {
		b.Fatal(err)
	}
	s := xds.NewFakeDiscoveryServer(b, xds.FakeOptions{Configs: cfgs, KubernetesObjects: objects})
	proxy := istioProxy(s, pod)
	var eds []string
	for _, c := range s.Clusters(proxy) {
		if c.GetType() == clusterv3.Cluster_EDS {
			eds = append(eds, c.GetName())
		}
	}
	routes := xdstest.ExtractRoutesFromListeners(s.Listeners(proxy))
	watched := map[string]*istiomodel.WatchedResource{
		v3.EndpointType: {TypeUrl: v3.EndpointType, ResourceNames: sets.New(eds...)},
		v3.RouteType:    {TypeUrl: v3.RouteType, ResourceNames: sets.New(routes...)},
	}
	goruntime.GC() // the setup's garbage is not the push's
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s.Discovery.Cache.ClearAll()
		b.StartTimer()
		size := 0
		for _, typeURL := range []string{v3.ClusterType, v3.EndpointType, v3.ListenerType, v3.RouteType} {
			res, _, err := s.Discovery.Generators[typeURL].Generate(proxy, watched[typeURL], &istiomodel.PushRequest{Push: s.PushContext(), Forced: true})
			if err != nil || len(res) == 0 {
				b.Fatalf("%s: %d resources, %v", typeURL, len(res), err)
			}
			for _, r := range res {
				size += len(r.GetResource().GetValue())
			}
		}
		b.ReportMetric(float64(size), "bytes/push")
	}
}

// benchOurPush is benchIstioPush by envoygen, from nothing each time (a
// new generator and a new snapshot of the same objects, built with the
// timer stopped; the indexes a snapshot builds when first asked are
// timed), each resource marshalled and hashed as istiod does.
func benchOurPush(b *testing.B, objects []runtime.Object, pod *corev1.Pod, istioYAML string) {
	benchOurPushFrom(b, objects, pod, istioYAML, false)
}

// benchOurPreparedPush is benchOurPush from a snapshot prepared before
// the timer starts (envoygen.Generator.Prepare): the snapshot's indexes of
// DestinationRules and Sidecars, the index of services by selector and
// every Sidecar's view in its own namespace are built, untimed; the push
// itself, with everything it builds per proxy or per VirtualService, is
// timed, from a new generator each time. That is what benchIstioPush
// leaves out of Istio's time: its PushContext, built before the timer,
// holds its DestinationRule and service indexes and every Sidecar's
// SidecarScope (initSidecarScopes), and the proxy, set up before it too,
// holds its SidecarScope and the services it serves.
func benchOurPreparedPush(b *testing.B, objects []runtime.Object, pod *corev1.Pod, istioYAML string) {
	benchOurPushFrom(b, objects, pod, istioYAML, true)
}

func benchOurPushFrom(b *testing.B, objects []runtime.Object, pod *corev1.Pod, istioYAML string, prepared bool) {
	snap := ourSnapshot(b, objects, istioYAML)
	p := &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}}
	var version [sha256.Size]byte
	goruntime.GC() // the setup's garbage is not the push's
	b.ResetTimer()
	for i := range b.N {
		// A generator and a snapshot of the same objects of their own
		// each push: nothing an earlier push built is there to be reused.
		b.StopTimer()
		g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
		snap = freshSnapshot(snap, i)
		if prepared {
			g.Prepare(snap)
		}
		b.StartTimer()
		size := 0
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
			res := g.Generate(snap, p, typeURL, nil, true)
			if len(res) == 0 {
				b.Fatalf("%s: no resources", typeURL)
			}
			for _, r := range res {
				raw, err := r.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				version = sha256.Sum256(raw) // istiod keeps a hash of each
				size += len(raw)
			}
		}
		b.ReportMetric(float64(size), "bytes/push")
	}
	_ = version
}

// silenceIstioLogs keeps Istio's discovery server from logging for the
// rest of the process: its controllers log from goroutines of their own,
// some after a benchmark's cleanup has stopped the server, and a line
// written then splits the result line benchstat reads. Only benchmarks
// call it, and no test reads Istio's log.
func silenceIstioLogs() {
	for _, s := range istiolog.Scopes() {
		s.SetOutputLevel(istiolog.NoneLevel)
	}
}
