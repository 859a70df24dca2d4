package interop

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

// TestRequestedNetworkViewMatchesIstio: a sidecar of network net-a whose
// node metadata REQUESTED_NETWORK_VIEW names its own network, the other
// one, both, neither (a value of a comma alone) or nothing gets from
// Bulwark the load assignment (endpoints, gateway addresses, weights)
// Istio's generator gives the same proxy, for a service with an endpoint
// on net-a, one on net-b (behind net-b's gateway) and one of no network.
func TestRequestedNetworkViewMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	local := strings.Join([]string{
		mcService("echo", 8080, map[string]string{"echo-1": "10.30.0.1", "echo-2": "10.30.0.2", "echo-3": "10.30.0.3"}),
		mcPod("echo-1", "echo", "10.30.0.1", "app: echo, security.istio.io/tlsMode: istio, topology.istio.io/network: net-a"),
		mcPod("echo-2", "echo", "10.30.0.2", "app: echo, security.istio.io/tlsMode: istio, topology.istio.io/network: net-b"),
		mcPod("echo-3", "echo", "10.30.0.3", "app: echo, security.istio.io/tlsMode: istio"),
		mcPod("client-1", "client", "10.30.0.9", "app: client, security.istio.io/tlsMode: istio, topology.istio.io/network: net-a"),
		networkGateway("gw-a", "net-a", "192.0.2.1"),
		networkGateway("gw-b", "net-b", "192.0.2.2"),
		networkGateway("gw-bb", "net-b", "192.0.2.3"),
	}, "---\n")
	const name = "outbound|80||echo.app.svc.cluster.local"
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{KubernetesObjectString: local})
	client := podOf(t, local, "client-1")
	istio := func(view string) []string {
		return istioLoadAssignment(t, s, client, "net-a", name, func(md *istiomodel.NodeMetadata) {
			if err := md.RequestedNetworkView.UnmarshalJSON([]byte(fmt.Sprintf("%q", view))); err != nil {
				t.Fatal(err)
			}
		})
	}

	store := model.NewStore()
	t.Cleanup(runKubesource(t, decodeKube(t, local), "", kubesource.Config{Publisher: store, ClusterID: compareLocal, SystemNamespace: "istio-system"}))
	ours := startOurXDS(t, store, compareLocal)
	bulwark := func(view string) []string {
		sc := ours.sidecar(t, client, compareLocal)
		sc.node.Metadata.Fields["NETWORK"] = structpb.NewStringValue("net-a")
		if view != "" {
			sc.node.Metadata.Fields["REQUESTED_NETWORK_VIEW"] = structpb.NewStringValue(view)
		}
		loads := sc.loads(t, []string{name})
		if len(loads) != 1 {
			t.Fatalf("view %q: %d load assignments, want %s", view, len(loads), name)
		}
		return weightedAddresses(loads[0])
	}

	// What each view must show, lest both generators agree on nothing.
	want := map[string][]string{
		"":            {"10.30.0.1:8080", "10.30.0.3:8080", "192.0.2.2:15443", "192.0.2.3:15443"},
		"net-a":       {"10.30.0.1:8080", "10.30.0.3:8080"},
		"net-b":       {"10.30.0.3:8080", "192.0.2.2:15443", "192.0.2.3:15443"},
		"net-a,net-b": {"10.30.0.1:8080", "10.30.0.3:8080", "192.0.2.2:15443", "192.0.2.3:15443"},
		"net-b,net-a": {"10.30.0.1:8080", "10.30.0.3:8080", "192.0.2.2:15443", "192.0.2.3:15443"},
		",":           {"10.30.0.3:8080"},
	}
	for _, view := range slices.Sorted(maps.Keys(want)) {
		got, theirs := bulwark(view), istio(view)
		t.Logf("view %q: ours %v, Istio's %v", view, got, theirs)
		if !slices.Equal(got, theirs) {
			t.Errorf("view %q: ours %v, Istio's %v", view, got, theirs)
		}
		if !slices.Equal(addressesOnly(got), want[view]) {
			t.Errorf("view %q: ours %v, want the addresses %v", view, got, want[view])
		}
	}
}
