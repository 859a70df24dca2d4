package xds

import (
	"fmt"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// withEgressScope is snap with a Sidecar selecting svc-0's pods and
// importing the first n of its services by name ("./svc-<i>...").
func withEgressScope(snap *model.Snapshot, n int) *model.Snapshot {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("./svc-%d.bench.svc.cluster.local", i)
	}
	res := *snap.Resources()
	res.Sidecars = []*model.Sidecar{{
		Meta: model.Meta{Name: "svc-0", Namespace: "bench"},
		Spec: &networkingv1.Sidecar{
			WorkloadSelector: &networkingv1.WorkloadSelector{Labels: map[string]string{"app": "svc-0"}},
			Egress:           []*networkingv1.IstioEgressListener{{Hosts: hosts}},
		},
	}}
	return model.BuildShared(snap.Version+"-scoped", snap.Options, res, snap)
}

// pushSize is the bytes of a full push (CDS, EDS, LDS, RDS) of w in st,
// as pushAllTypes asks for it, and the number of clusters.
func pushSize(tb testing.TB, srv *Server, st *pushState, w *identity.Workload) (bytes, clusters int) {
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
		bytes += r.size
		for _, g := range r.gen {
			switch {
			case typeURL == resource.ClusterType && len(g.name) > 9 && g.name[:9] == "outbound|":
				eds = append(eds, g.name)
				clusters++
			case typeURL == resource.ListenerType && len(g.name) > 8 && g.name[:8] == "0.0.0.0_":
				rds = append(rds, g.name[8:])
			}
		}
	}
	if clusters == 0 {
		tb.Fatal("no outbound clusters")
	}
	return bytes, clusters
}

// TestSidecarScopedConfigIsSmall: among 1,000 services, a sidecar whose
// Sidecar imports 100 of them gets at most 15% of the configuration it
// gets without the Sidecar.
func TestSidecarScopedConfigIsSmall(t *testing.T) {
	full := sidecarBenchModel(t, 1000)
	scoped := withEgressScope(full, 100)
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		t.Fatal(err)
	}
	w := benchWorkload(t, "svc-0-0", "10.1.0.1")
	unscopedBytes, unscopedClusters := pushSize(t, srv, newPushState(full, time.Time{}), w)
	scopedBytes, scopedClusters := pushSize(t, srv, newPushState(scoped, time.Time{}), w)
	ratio := float64(scopedBytes) / float64(unscopedBytes)
	t.Logf("unscoped: %d bytes, %d outbound clusters; scoped to 100 services: %d bytes, %d clusters (%.1f%%)",
		unscopedBytes, unscopedClusters, scopedBytes, scopedClusters, 100*ratio)
	if scopedClusters != 200 || unscopedClusters != 2000 {
		t.Errorf("clusters %d scoped, %d unscoped; want 200 and 2000", scopedClusters, unscopedClusters)
	}
	if ratio > 0.15 {
		t.Errorf("the scoped configuration is %.1f%% of the unscoped one, more than 15%%", 100*ratio)
	}
}

// BenchmarkSidecarScopedPush is BenchmarkSidecarPush's first push for a
// sidecar among 1,000 services, without a Sidecar and with one importing
// 100 of them: the time, and the bytes of each push.
func BenchmarkSidecarScopedPush(b *testing.B) {
	full := sidecarBenchModel(b, 1000)
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		b.Fatal(err)
	}
	w := benchWorkload(b, "svc-0-0", "10.1.0.1")
	for _, c := range []struct {
		name string
		snap *model.Snapshot
	}{{"unscoped/services=1000", full}, {"sidecar/imported=100", withEgressScope(full, 100)}} {
		b.Run(c.name, func(b *testing.B) {
			var size int
			for range b.N {
				size, _ = pushSize(b, srv, newPushState(c.snap, time.Time{}), w)
			}
			b.ReportMetric(float64(size), "config-bytes")
		})
	}
}
