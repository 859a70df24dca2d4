package interop

import (
	"encoding/json"
	"testing"
)

// withClusterAndNetwork lays global.multiCluster.clusterName and
// global.network over a values document.
func withClusterAndNetwork(t *testing.T, values, cluster, network string) string {
	t.Helper()
	m := map[string]any{}
	if values != "" {
		if err := json.Unmarshal([]byte(values), &m); err != nil {
			t.Fatal(err)
		}
	}
	deepMerge(m, map[string]any{"global": map[string]any{
		"network": network, "multiCluster": map[string]any{"clusterName": cluster},
	}})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestInjectPathMatchesIstio: a pod sent to /inject/cluster/cluster-b/net/net2
// (primary-remote: the remote cluster's webhook calls the primary's istiod
// on that path) is injected as Istio's injector injects it. Istio's webhook
// turns the path into ISTIO_META_CLUSTER_ID and ISTIO_META_NETWORK, which
// take precedence over the values' global.multiCluster.clusterName and
// global.network, below the pod's own topology.istio.io/network label
// (pkg/kube/inject extractClusterAndNetwork, RunTemplate, applyMetadata);
// so Istio's injector is run with the path's cluster and network as its
// values, and Bulwark's with the path's over values that name others.
func TestInjectPathMatchesIstio(t *testing.T) {
	const plain = `
metadata: {name: app, namespace: shop}
spec:
  containers: [{name: app, image: example.com/app:1}]
`
	for name, tc := range map[string]struct{ values, pod, network string }{
		"the values name another cluster and network": {
			values: `{"global": {"network": "net1", "multiCluster": {"clusterName": "cluster-a"}}}`, pod: plain, network: "net2"},
		"the values name no cluster or network": {pod: plain, network: "net2"},
		"the pod's topology.istio.io/network label wins over the path's": {
			values: `{"global": {"network": "net1"}}`, network: "net-west", pod: `
metadata: {name: west, namespace: shop, labels: {topology.istio.io/network: net-west}}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
		"proxyless gRPC": {values: `{"global": {"multiCluster": {"clusterName": "cluster-a"}}}`, network: "net2", pod: `
metadata: {name: grpc, namespace: shop, annotations: {inject.istio.io/templates: grpc-agent}}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	} {
		t.Run(name, func(t *testing.T) {
			pod := parsePod(t, tc.pod)
			ours := newInjectors(t, pod.Namespace, tc.values)
			ours.ours.ClusterID, ours.ours.Network = clusterB, "net2"
			theirs := newInjectors(t, pod.Namespace, withClusterAndNetwork(t, tc.values, clusterB, "net2"))

			istioPod, err := theirs.istio(pod)
			if err != nil {
				t.Fatalf("istio: %v", err)
			}
			mutated, patched, err := ours.bulwark(pod)
			if err != nil {
				t.Fatalf("bulwark: %v", err)
			}
			comparePodsAs(t, "Mutate", "patch", mutated, patched)
			proxy := findProxy(patched)
			if proxy == nil {
				t.Fatal("no istio-proxy")
			}
			env := map[string]string{}
			for _, e := range proxy.Env {
				env[e.Name] = e.Value
			}
			if env["ISTIO_META_CLUSTER_ID"] != clusterB || env["ISTIO_META_NETWORK"] != tc.network {
				t.Errorf("ISTIO_META_CLUSTER_ID=%q ISTIO_META_NETWORK=%q, want %s and %s",
					env["ISTIO_META_CLUSTER_ID"], env["ISTIO_META_NETWORK"], clusterB, tc.network)
			}
			if got := patched.Labels["topology.istio.io/network"]; got != tc.network {
				t.Errorf("label topology.istio.io/network=%q, want %s", got, tc.network)
			}

			normalizeEncoding(t, istioPod)
			normalizeEncoding(t, patched)
			defaultVolumeSources(istioPod)
			dropIstioCRL(t, istioPod)
			dropOverrides(istioPod)
			dropAgentSecurityContext(t, istioPod, patched)
			comparePods(t, istioPod, patched)
		})
	}
}
