package interop

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// benchMeshVirtualServices are n VirtualServices of namespace bench bound
// to the mesh (no gateways), one for each service svc-i (n ≤ the
// services): a header match with a weighted split to two other services,
// a regex match with a response header operation, and a default route
// with retries, a timeout and a mirror — the rules of a busy mesh.
func benchMeshVirtualServices(n, services int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(virtualService(fmt.Sprintf("vs-%d", i), "bench", fmt.Sprintf(`
hosts: [svc-%[1]d.bench.svc.cluster.local]
http:
- name: canary
  match: [{uri: {prefix: /api/}, headers: {x-canary: {exact: "true"}}}]
  route:
  - {destination: {host: svc-%[1]d.bench.svc.cluster.local, port: {number: 80}}, weight: 90}
  - {destination: {host: svc-%[2]d.bench.svc.cluster.local, port: {number: 80}}, weight: 10}
- name: static
  match: [{uri: {regex: "/static/[a-z0-9]+\\.(css|js)"}}]
  route: [{destination: {host: svc-%[3]d.bench.svc.cluster.local, port: {number: 80}}}]
  headers: {response: {set: {cache-control: max-age=60}}}
- name: default
  route: [{destination: {host: svc-%[1]d.bench.svc.cluster.local, port: {number: 80}}}]
  retries: {attempts: 3, perTryTimeout: 2s, retryOn: "5xx,reset"}
  timeout: 10s
  mirror: {host: svc-%[2]d.bench.svc.cluster.local, port: {number: 80}}
  mirrorPercentage: {value: 5}`, i, (i+1)%services, (i+2)%services)))
	}
	return b.String()
}

// BenchmarkSidecarGenerationMesh is a sidecar's full push (CDS, EDS of
// every cluster, LDS, RDS of every route; as BenchmarkSidecarGeneration,
// from nothing built) in a mesh of 1,000 services, 1,000 VirtualServices
// bound to the mesh and 100 ServiceEntries, by Istio's generator and by
// envoygen on the same objects, each reporting bytes/push.
//
// Each case is a configuration beside the world. Case "sidecar=10%" adds
// the namespace's Sidecar (benchEgressSidecar) importing a tenth of the
// services and of the ServiceEntries, and with them the VirtualServices
// of those hosts; Istio's generator reads the same Sidecar.
//
// Case "bulwark-prepared" is envoygen's push from a snapshot whose shared
// per-snapshot state was built before the timer (benchOurPreparedPush),
// as Istio's push context is; "bulwark" builds it in the push.
func BenchmarkSidecarGenerationMesh(b *testing.B) {
	const services = 1000
	objects := benchWorld(services)
	pod := objects[2].(*corev1.Pod) // svc-0-0
	mesh := benchPolicies + benchEntries(100) + benchMeshVirtualServices(1000, services)
	for _, bc := range []struct {
		name   string
		config string
	}{
		{"services=1000/vs=1000/entries=100", mesh},
		{"services=1000/vs=1000/entries=100/sidecar=10%", mesh + benchEgressSidecar(services/10, 10)},
	} {
		b.Run("istio/"+bc.name, func(b *testing.B) { benchIstioPush(b, objects, pod, bc.config) })
		b.Run("bulwark/"+bc.name, func(b *testing.B) { benchOurPush(b, objects, pod, bc.config) })
		b.Run("bulwark-prepared/"+bc.name, func(b *testing.B) { benchOurPreparedPush(b, objects, pod, bc.config) })
	}
}

// benchEgressSidecar is namespace bench's Sidecar, its egress importing
// services svc-0 to svc-<services-1> and entries e0 to e<entries-1> of
// that namespace by name.
func benchEgressSidecar(services, entries int) string {
	var b strings.Builder
	b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: bench}\nspec:\n  egress:\n  - hosts:\n")
	for i := range services {
		fmt.Fprintf(&b, "    - bench/svc-%d.bench.svc.cluster.local\n", i)
	}
	for i := range entries {
		fmt.Fprintf(&b, "    - bench/e%d.example.com\n", i)
	}
	return b.String()
}

// TestSidecarScopedMeshConfigIsSmall: in BenchmarkSidecarGenerationMesh's
// mesh, the sidecar whose namespace's Sidecar imports a tenth of the
// hosts is sent at most 15% of the bytes it is sent without the Sidecar.
func TestSidecarScopedMeshConfigIsSmall(t *testing.T) {
	const services = 1000
	objects := benchWorld(services)
	pod := objects[2].(*corev1.Pod) // svc-0-0
	mesh := benchPolicies + benchEntries(100) + benchMeshVirtualServices(1000, services)
	full := ourPushBytes(t, ourSnapshot(t, objects, mesh), pod)
	scoped := ourPushBytes(t, ourSnapshot(t, objects, mesh+benchEgressSidecar(services/10, 10)), pod)
	ratio := float64(scoped) / float64(full)
	t.Logf("unscoped %d bytes, scoped %d bytes (%.1f%%)", full, scoped, 100*ratio)
	if ratio > 0.15 {
		t.Errorf("the scoped configuration is %.1f%% of the unscoped one, more than 15%%", 100*ratio)
	}
	if ratio < 0.01 {
		t.Errorf("the scoped configuration is %.1f%% of the unscoped one: the Sidecar imports next to nothing", 100*ratio)
	}
}

// ourPushBytes is the size of pod's full push (CDS, EDS, LDS, RDS) by
// envoygen from snap.
func ourPushBytes(t testing.TB, snap *model.Snapshot, pod *corev1.Pod) int {
	t.Helper()
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
	p := &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}}
	size := 0
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		for _, r := range g.Generate(snap, p, typeURL, nil, true) {
			raw, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			size += len(raw)
		}
	}
	return size
}
