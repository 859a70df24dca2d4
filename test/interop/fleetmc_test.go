package interop

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// BenchmarkFleetMultiCluster is the fleet benchmark (BenchmarkFleetVsIstio)
// on several clusters: the primary, the shared API server of the tests,
// and FLEET_CLUSTERS-1 remotes, each a kube-apiserver of its own with its
// own service-account issuer. Every cluster holds the same mesh of
// FLEET_SERVICES services of two pods each, under the same names in the
// same namespaces (namespace sameness: the services merge by hostname, and
// every proxy gets each service's endpoints of every cluster), with pod
// addresses of its own (one flat network). FLEET_PROXIES simulated Envoy
// sidecars, pods of the primary, hold Delta ADS streams to the control
// plane of the primary, which reads the remotes through the remote secrets
// `istioctl create-remote-secret` writes for them.
//
// Each round, for each control plane (Istio's pilot-discovery and
// Bulwark's istiod, FLEET_CONTROL_PLANES as the fleet's), measures:
//   - its live heap and RSS with 0, 1, 2, … remote clusters registered:
//     each remote secret is applied in turn, and measured once the
//     control plane's /debug/clusterz says the cluster is synced and its
//     CPU is quiet (the time to that is reported too);
//   - the time for the fleet to hold its whole configuration, with every
//     service's endpoints of every cluster;
//   - an endpoint move in the first remote cluster (a pod replaced, its
//     EndpointSlice updated), seen by every proxy: p50, p99 and max over
//     the proxies, how many were sent anything, the control plane's CPU;
//   - the same move in the primary, for comparison.
//
// Sizes: FLEET_CLUSTERS (default 3, at least 2), FLEET_SERVICES (default
// 1,000), FLEET_PROXIES (default 1,000), FLEET_ROUNDS (default 3);
// FLEET_PROFILE as the fleet's.
//
//	cd test/interop && ISTIOD_BIN=../../bin/istiod go test -short -run '^$' -bench FleetMultiCluster -benchtime 1x -timeout 150m .
func BenchmarkFleetMultiCluster(b *testing.B) {
	if raceEnabled {
		b.Fatal("run the fleet benchmark without -race: it would measure the race detector")
	}
	size, clusters, err := fleetMCSize()
	if err != nil {
		b.Fatal(err)
	}
	kinds, bins := fleetControlPlanes(b)
	raiseNoFile(b)
	env := testenv.Get(b)
	b.Run(fmt.Sprintf("clusters=%d,services=%d,proxies=%d", clusters, size.services, size.proxies), func(b *testing.B) {
		mc := newFleetMC(b, env, clusters, size.services)
		meshFile, networksFile := fleetMeshConfig(b, mc.local.root)
		results := map[string][]*mcRound{}
		for round := 1; round <= size.rounds; round++ {
			for _, kind := range kinds {
				cp := startFleetCP(b, kind, bins[kind], env, mc.local.root, meshFile, networksFile, round)
				results[kind] = append(results[kind], runMCRound(b, size, mc, cp, kind, round))
			}
		}
		reportMC(b, size, mc, kinds, results)
	})
}

// fleetMCSize is the size of the multi-cluster fleet, from the
// environment.
func fleetMCSize() (size fleetSize, clusters int, err error) {
	if clusters, err = envCount("FLEET_CLUSTERS", 3); err != nil {
		return size, 0, err
	}
	if size.services, err = envCount("FLEET_SERVICES", 1000); err != nil {
		return size, 0, err
	}
	if size.proxies, err = envCount("FLEET_PROXIES", 1000); err != nil {
		return size, 0, err
	}
	if size.rounds, err = envCount("FLEET_ROUNDS", 3); err != nil {
		return size, 0, err
	}
	switch {
	case clusters < 2 || clusters > fleetMCMaxClusters:
		return size, 0, fmt.Errorf("FLEET_CLUSTERS=%d: from 2 (the primary and a remote) to %d", clusters, fleetMCMaxClusters)
	case size.services < 2 || 2*size.services >= fleetMCIPSpan:
		return size, 0, fmt.Errorf("FLEET_SERVICES=%d: from 2 (the two moves) to %d", size.services, fleetMCIPSpan/2-1)
	case size.proxies < fleetSamples || size.proxies > 2*size.services:
		return size, 0, fmt.Errorf("FLEET_PROXIES=%d: between %d and twice FLEET_SERVICES (one per pod)", size.proxies, fleetSamples)
	}
	return size, clusters, nil
}

// fleetMC is the meshes of the primary and its remotes.
type fleetMC struct {
	env     *testenv.Env // the primary's
	local   *fleetMesh
	remotes []*fleetRemote
}

// fleetRemote is a remote cluster: its API server, its mesh, and the
// remote secret istioctl wrote for it (without a namespace).
type fleetRemote struct {
	id     string
	env    *testenv.Env
	mesh   *fleetMesh
	secret *corev1.Secret
}

// fleetMCIPSpan is the pod addresses (fleetIP numbers) each cluster's
// mesh starts with, from k*fleetMCIPSpan for the k-th cluster; the pods
// that replace them are numbered from 1<<20 + k*fleetMCIPSpan (fleetMesh
// nextIP), so that up to fleetMCMaxClusters clusters never share one.
const (
	fleetMCIPSpan      = 1 << 18
	fleetMCMaxClusters = 4
)

// newFleetMC creates the primary's mesh of m services on env, then each
// remote's: an API server of its own, the same namespaces and services,
// and istioctl's remote secret for it.
func newFleetMC(b *testing.B, env *testenv.Env, clusters, m int) *fleetMC {
	b.Helper()
	mc := &fleetMC{env: env, local: newFleetMesh(b, env, m)}
	for k := 1; k < clusters; k++ {
		renv := testenv.StartPrivate(b)
		place := fleetPlace{root: mc.local.root, namespaces: mc.local.namespaces, ipBase: k * fleetMCIPSpan, private: true}
		createNamespaces(b, renv, append([]string{place.root}, place.namespaces...))
		rc := &fleetRemote{id: fmt.Sprintf("cluster-%c", 'a'+k), env: renv}
		rc.mesh = newFleetMeshAt(b, renv, m, place)
		rc.secret = istioctlRemoteSecret(b, renv, rc.id)
		grantReadAll(b, renv, "istio-system", "istio-reader-service-account")
		mc.remotes = append(mc.remotes, rc)
	}
	return mc
}

// servicesAt is the i-th service of every cluster, which share one
// hostname.
func (mc *fleetMC) servicesAt(i int) []*fleetService {
	out := []*fleetService{mc.local.services[i]}
	for _, rc := range mc.remotes {
		out = append(out, rc.mesh.services[i])
	}
	return out
}

// expected is the endpoints every proxy's outbound clusters must have:
// those of every cluster.
func (mc *fleetMC) expected() map[string]uint64 {
	out := make(map[string]uint64, len(mc.local.services))
	for i, s := range mc.local.services {
		out[s.cluster()] = mergedFingerprint(mc.servicesAt(i)...)
	}
	return out
}

// createNamespaces creates namespaces of the given names on env, which
// goes with them.
func createNamespaces(b *testing.B, env *testenv.Env, names []string) {
	b.Helper()
	client := env.Client(b)
	for _, name := range names {
		_, err := client.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatalf("create namespace %s: %v", name, err)
		}
	}
}

// grantReadAll lets ns/sa of env's cluster read every kind. The remote
// reader of docs/rbac.md, which istioctlRemoteSecret grants, is what
// Bulwark needs; Istio reads more kinds in a remote cluster (its own
// reader role has Namespaces, Secrets, ConfigMaps, Istio's kinds). Both
// control planes read the remotes with this, held back by RBAC neither.
func grantReadAll(b *testing.B, env *testenv.Env, ns, sa string) {
	b.Helper()
	const name = "fleet-read-all"
	ctx := context.Background()
	rbac := env.Client(b).RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		b.Fatalf("create cluster role %s: %v", name, err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("bind cluster role %s: %v", name, err)
	}
}
