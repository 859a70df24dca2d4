package interop

import (
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/cluster"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/clusters"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// The two clusters of the comparison: Istio's fake discovery server names
// its config cluster "Kubernetes", istiod's default CLUSTER_ID.
const (
	compareLocal  = "Kubernetes"
	compareRemote = "cluster-b"
)

// mcPod is a running pod of ns app.
func mcPod(name, sa, ip string, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: app, uid: uid-%s, labels: {%s}}
spec: {serviceAccountName: %s, containers: [{name: app, image: app}]}
status: {phase: Running, podIP: %s, podIPs: [{ip: %s}]}
`, name, name, labels, sa, ip, ip)
}

// mcService is Service name of ns app with ports http 80 and grpc 7070, and
// its slice of the pods given (name → ip) on target ports target and
// target+1.
func mcService(name string, target int, pods map[string]string) string {
	s := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: app}
spec:
  clusterIP: 10.96.0.%d
  selector: {app: %s}
  ports: [{name: http, port: 80, targetPort: %d}, {name: grpc, port: 7070, targetPort: %d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-1, namespace: app, labels: {kubernetes.io/service-name: %s}}
addressType: IPv4
ports: [{name: http, port: %d}, {name: grpc, port: %d}]
endpoints:
`, name, len(name), name, target, target+1, name, name, target, target+1)
	for _, pod := range []string{"1", "2", "3"} {
		ip, ok := pods[name+"-"+pod]
		if !ok {
			continue
		}
		s += fmt.Sprintf("- {addresses: [%s], conditions: {ready: true}, targetRef: {kind: Pod, namespace: app, name: %s-%s, uid: uid-%s-%s}}\n",
			ip, name, pod, name, pod)
	}
	return s
}

func TestMultiClusterEndpointsMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	local := mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.1"}) + "---\n" +
		mcPod("echo-1", "echo", "10.10.0.1", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcService("local", 8080, map[string]string{"local-1": "10.10.0.5"}) + "---\n" +
		mcPod("local-1", "local", "10.10.0.5", "app: local, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("sleep", "sleep", "10.10.0.9", "app: sleep, security.istio.io/tlsMode: istio")
	remote := mcService("echo", 9090, map[string]string{"echo-2": "10.20.0.2", "echo-3": "10.20.0.3"}) + "---\n" +
		mcPod("echo-2", "echo-b", "10.20.0.2", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("echo-3", "legacy", "10.20.0.3", "app: echo") + "---\n" +
		mcService("far", 7000, map[string]string{"far-1": "10.20.0.7"}) + "---\n" +
		mcPod("far-1", "far", "10.20.0.7", "app: far, security.istio.io/tlsMode: istio")
	rules := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  subsets:
  - {name: local, labels: {topology.istio.io/cluster: Kubernetes}}
  - {name: remote, labels: {topology.istio.io/cluster: cluster-b}}
  - {name: remote-v1, labels: {topology.istio.io/cluster: cluster-b, security.istio.io/tlsMode: istio}}
`
	s, store := twoClusterModels(t, local, remote, rules)
	snap := store.Current()
	if snap.Service("far.app.svc.cluster.local") == nil {
		t.Fatal("the remote cluster's own service is not in the merged model")
	}

	pod := podOf(t, local, "sleep")
	proxy := istioProxy(s, pod)
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
	ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}})
	istio := s.Endpoints(proxy)
	d := &differences{t: t, scenario: "multicluster", used: map[int]bool{}, list: []allowedDifference{}}
	compareEndpoints(d, istio, ours.endpoints)
	// Each outbound cluster's TLS, with the SANs of every cluster's
	// endpoints.
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range ours.clusters {
		byName[c.GetName()] = c
	}
	for _, ic := range s.Clusters(proxy) {
		if oc, ok := byName[ic.GetName()]; ok && strings.HasPrefix(ic.GetName(), "outbound|") {
			d.check("cluster TLS "+ic.GetName(), clusterTLS(ic), clusterTLS(oc), "")
		}
	}
	checked := 0
	for _, cla := range istio {
		if n := len(cla.GetEndpoints()); n > 0 {
			checked++
		}
	}
	if checked < 6 {
		t.Fatalf("only %d of Istio's load assignments have endpoints: the comparison would prove little", checked)
	}
	t.Logf("%d load assignments compared, %d with endpoints", len(istio), checked)
}

// podOf is the pod name of the manifests docs.
func podOf(t *testing.T, docs, name string) *corev1.Pod {
	t.Helper()
	for _, o := range decodeKube(t, docs) {
		if p, ok := o.(*corev1.Pod); ok && p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %s", name)
	return nil
}

// twoClusterModels gives Istio's fake discovery server and Bulwark's model
// the same two clusters (local with the Istio configuration rules, remote)
// and the same rules: Bulwark's as two kubesources merged by
// pkg/model/clusters, stopped when t ends.
func twoClusterModels(t *testing.T, local, remote, rules string) (*xds.FakeDiscoveryServer, *model.Store) {
	t.Helper()
	cfgs, _, err := crd.ParseInputs(rules)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectStringByCluster: map[cluster.ID]string{
		compareLocal: local, compareRemote: remote,
	}})

	store := model.NewStore()
	_, log := logtest.New(t)
	merger, err := clusters.New(store, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopRemote := runKubesource(t, decodeKube(t, remote), "", kubesource.Config{Publisher: merger.Remote(compareRemote),
		ClusterID: compareRemote, EndpointsOnly: true})
	t.Cleanup(stopRemote)
	stopLocal := runKubesource(t, decodeKube(t, local), rules, kubesource.Config{Publisher: merger.Local(), ClusterID: compareLocal})
	t.Cleanup(stopLocal)
	return s, store
}
