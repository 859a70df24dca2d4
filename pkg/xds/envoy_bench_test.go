package xds

import (
	"fmt"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// sidecarBenchModel is n services of namespace bench, each with an HTTP
// and a TCP port, a virtual IP and two sidecar endpoints, STRICT mTLS and
// an ALLOW policy on svc-0.
func sidecarBenchModel(b testing.TB, n int) *model.Snapshot {
	b.Helper()
	res := model.Resources{Pods: []*model.Pod{}}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		labels := map[string]string{"app": name, model.TLSModeLabel: "istio"}
		svc := &model.Service{
			Meta: model.Meta{Name: name, Namespace: "bench"}, Selector: map[string]string{"app": name},
			Addresses: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "TCP"}, {Name: "tcp", Port: 9000, Protocol: "TCP"}},
			Endpoints: map[uint32][]model.Endpoint{},
		}
		for j := range 2 {
			ip := fmt.Sprintf("10.%d.%d.%d", 1+j, i/250, i%250+1)
			for _, p := range []struct{ svc, target uint32 }{{80, 8080}, {9000, 9000}} {
				svc.Endpoints[p.svc] = append(svc.Endpoints[p.svc], model.Endpoint{
					Address: ip, Port: p.target, ServiceAccount: name, Namespace: "bench", Labels: labels, Weight: 1,
				})
			}
			res.Pods = append(res.Pods, &model.Pod{Meta: model.Meta{Name: fmt.Sprintf("%s-%d", name, j), Namespace: "bench"}, ServiceAccount: name, Labels: labels, IPs: []string{ip}})
		}
		res.Services = append(res.Services, svc)
	}
	snap := modeltest.Load(b, `
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
`)
	res.PeerAuthentications = snap.Resources().PeerAuthentications
	res.AuthorizationPolicies = snap.Resources().AuthorizationPolicies
	return model.Build(fmt.Sprintf("bench-%d", n), model.Options{}, res)
}

// BenchmarkSidecarPush is a full push (CDS, EDS, LDS, RDS) for an Envoy
// sidecar through the server's shared push state: first, the first proxy
// of a model (pod svc-0-0, nothing built yet); second, further replicas of
// the same workload (same namespace and policies, their own addresses)
// once the first has been served.
func BenchmarkSidecarPush(b *testing.B) {
	for _, n := range []int{100, 1000} {
		snap := sidecarBenchModel(b, n)
		srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
		if err != nil {
			b.Fatal(err)
		}
		first := benchWorkload(b, "svc-0-0", "10.1.0.1")
		b.Run(fmt.Sprintf("first/services=%d", n), func(b *testing.B) {
			for range b.N {
				pushAllTypes(b, srv, newPushState(snap, time.Time{}), first)
			}
		})
		b.Run(fmt.Sprintf("second/services=%d", n), func(b *testing.B) {
			st := newPushState(snap, time.Time{})
			pushAllTypes(b, srv, st, first)
			b.ResetTimer()
			for i := range b.N {
				pushAllTypes(b, srv, st, benchWorkload(b, fmt.Sprintf("svc-0-r%d", i), fmt.Sprintf("10.3.%d.%d", i/250%250, i%250+1)))
			}
		})
	}
}

func benchWorkload(b testing.TB, pod, ip string) *identity.Workload {
	b.Helper()
	return &identity.Workload{Envoy: true, Namespace: "bench", ServiceAccount: "svc-0", Pod: pod, IPs: []string{ip}}
}

// pushAllTypes generates what Envoy asks for in order: every cluster,
// the load assignment of each, every listener, every route.
func pushAllTypes(b *testing.B, srv *Server, st *pushState, w *identity.Workload) {
	key, gen := srv.mesh.Load().Scope(w, st.snap)
	var eds, rds []string
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		names, wildcard := []string(nil), true
		switch typeURL {
		case resource.EndpointType:
			names, wildcard = eds, false
		case resource.RouteType:
			names, wildcard = rds, false
		}
		r := st.response(srv, gen, sharedKey{typeURL: typeURL, proxy: key, names: namesKey(names), wildcard: wildcard}, names)
		if len(r.resources) == 0 {
			b.Fatalf("%s: no resources", typeURL)
		}
		for _, g := range r.gen {
			switch typeURL {
			case resource.ClusterType:
				if g.name[:9] == "outbound|" {
					eds = append(eds, g.name)
				}
			case resource.ListenerType:
				if g.name[:8] == "0.0.0.0_" {
					rds = append(rds, g.name[8:])
				}
			}
		}
	}
}
