package kubesource

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// BenchmarkBuild builds a snapshot of 1,000 services of 5 pods each (two
// ports, one EndpointSlice per service) and 100 policies of each kind, in
// 50 namespaces, from listers, again and again as the source does, one
// EndpointSlice changed before each build: what did not change since the
// last build is reused.
func BenchmarkBuild(b *testing.B) {
	const services, podsPerService, namespaces = 1000, 5, 50
	var objs []any
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		name := fmt.Sprintf("svc-%d", i)
		labels := map[string]string{"app": name}
		objs = append(objs, newService(ns, name, labels,
			servicePort("grpc", 8080, intstr.FromInt32(9000)), servicePort("http", 80, intstr.FromString("web"))))
		var eps []discoveryv1.Endpoint
		for j := range podsPerService {
			pod := fmt.Sprintf("%s-%d", name, j)
			ip := fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)
			objs = append(objs, newPod(ns, pod, name, ip, map[string]string{
				"app": name, "version": "v1", model.TLSModeLabel: "istio", "pod-template-hash": "5d9c8f7b6",
			}))
			eps = append(eps, podEndpoint(ns, pod, ip))
		}
		objs = append(objs, newSlice(ns, name+"-abcde", name, map[string]int32{"grpc": 9000, "http": 8081}, eps...))
		if i%10 == 0 {
			objs = append(objs, newPeerAuthentication(ns, name), newDestinationRule(ns, name, name))
		}
	}
	l, idx := cacheIndexers(b, objs...)
	slices := idx["eps"].List()
	var r reuse
	buildReusing(l, model.Options{}, &r, &touched{})
	b.ReportAllocs()
	var snap *model.Snapshot
	n := 0
	for b.Loop() {
		old := slices[n%len(slices)].(*discoveryv1.EndpointSlice)
		moved := old.DeepCopy()
		moved.Endpoints[0].Conditions.Ready = ptr.To(n/len(slices)%2 == 1)
		if err := idx["eps"].Update(moved); err != nil {
			b.Fatal(err)
		}
		var events touched
		events.add(old)
		events.add(moved)
		snap = buildReusing(l, model.Options{}, &r, &events)
		slices[n%len(slices)] = moved
		n++
	}
	if n := len(snap.Services()); n != services {
		b.Fatalf("%d services", n)
	}
	if n := len(snap.Services()[len(snap.Services())-1].Endpoints[8080]); n < podsPerService-1 {
		b.Fatalf("%d endpoints", n)
	}
}
