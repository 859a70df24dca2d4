package interop

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
// Each case is a configuration beside the world; a case with a Sidecar
// resource scoping the proxy's egress goes in this table, and is compared
// the same way.
func BenchmarkSidecarGenerationMesh(b *testing.B) {
	const services = 1000
	objects := benchWorld(services)
	pod := objects[2].(*corev1.Pod) // svc-0-0
	for _, bc := range []struct {
		name   string
		config string
	}{
		{"services=1000/vs=1000/entries=100", benchPolicies + benchEntries(100) + benchMeshVirtualServices(1000, services)},
	} {
		b.Run("istio/"+bc.name, func(b *testing.B) { benchIstioPush(b, objects, pod, bc.config) })
		b.Run("bulwark/"+bc.name, func(b *testing.B) { benchOurPush(b, objects, pod, bc.config) })
	}
}
