package kubesource

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestEndpointsCarryTheirClusterAndNetwork(t *testing.T) {
	svc := newService("ns", "echo", map[string]string{"app": "echo"}, servicePort("http", 80, intstr.FromInt32(8080)))
	plain := newPod("ns", "plain", "echo", "10.0.0.1", map[string]string{"app": "echo"})
	netted := newPod("ns", "netted", "echo", "10.0.0.2", map[string]string{"app": "echo", model.NetworkLabel: "net-pod"})
	anonymous := discoveryv1.Endpoint{Addresses: []string{"10.0.0.3"}}
	slice := newSlice("ns", "echo-1", "echo", map[string]int32{"http": 8080},
		podEndpoint("ns", "plain", "10.0.0.1"), podEndpoint("ns", "netted", "10.0.0.2"), anonymous)
	l := cacheListers(t, svc, plain, netted, slice)

	tests := map[string]struct {
		topo                    topology
		want                    map[string][2]string // address → cluster, network
		wantLabels              map[string]map[string]string
		clusterLabelOnAnonymous bool
	}{
		"without a cluster ID, endpoints name no cluster and keep their pod's labels": {
			want: map[string][2]string{"10.0.0.1": {"", ""}, "10.0.0.2": {"", "net-pod"}, "10.0.0.3": {"", ""}},
			wantLabels: map[string]map[string]string{
				"10.0.0.1": {"app": "echo"},
				"10.0.0.2": {"app": "echo", model.NetworkLabel: "net-pod"},
				"10.0.0.3": nil,
			},
		},
		"a cluster ID is the cluster of every endpoint, and its label": {
			topo: topology{cluster: "c1"},
			want: map[string][2]string{"10.0.0.1": {"c1", ""}, "10.0.0.2": {"c1", "net-pod"}, "10.0.0.3": {"c1", ""}},
			wantLabels: map[string]map[string]string{
				"10.0.0.1": {"app": "echo", model.ClusterLabel: "c1"},
				"10.0.0.2": {"app": "echo", model.ClusterLabel: "c1", model.NetworkLabel: "net-pod"},
				"10.0.0.3": {model.ClusterLabel: "c1"},
			},
		},
		"the cluster's network is the network of pods that name none": {
			topo: topology{cluster: "c1", network: "net-1"},
			want: map[string][2]string{"10.0.0.1": {"c1", "net-1"}, "10.0.0.2": {"c1", "net-pod"}, "10.0.0.3": {"c1", "net-1"}},
			wantLabels: map[string]map[string]string{
				"10.0.0.1": {"app": "echo", model.ClusterLabel: "c1", model.NetworkLabel: "net-1"},
				"10.0.0.2": {"app": "echo", model.ClusterLabel: "c1", model.NetworkLabel: "net-pod"},
				"10.0.0.3": {model.ClusterLabel: "c1", model.NetworkLabel: "net-1"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &reuse{topo: tc.topo}
			snap := buildReusing(l, model.Options{}, r, &touched{})
			eps := snap.Service("echo.ns.svc.cluster.local").Endpoints[80]
			if len(eps) != 3 {
				t.Fatalf("endpoints: %+v", eps)
			}
			for _, ep := range eps {
				if got := [2]string{ep.Cluster, ep.Network}; got != tc.want[ep.Address] {
					t.Errorf("%s: cluster, network = %q, want %q", ep.Address, got, tc.want[ep.Address])
				}
				if !equalLabels(ep.Labels, tc.wantLabels[ep.Address]) {
					t.Errorf("%s: labels %v, want %v", ep.Address, ep.Labels, tc.wantLabels[ep.Address])
				}
			}
			if plain.Labels[model.ClusterLabel] != "" {
				t.Error("the cached pod's labels were changed")
			}
		})
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestEndpointsOnlyNeedsNoIstioClientAndAsksNoDiscovery(t *testing.T) {
	kube := newFakeKube(
		newService("ns", "echo", map[string]string{"app": "echo"}, servicePort("http", 80, intstr.FromInt32(8080))),
		newPod("ns", "a", "echo", "10.0.0.1", map[string]string{"app": "echo"}),
		newSlice("ns", "echo-1", "echo", map[string]int32{"http": 8080}, podEndpoint("ns", "a", "10.0.0.1")),
	)
	store := &recorder{Store: model.NewStore()}
	src, err := New(Config{Client: kube, Publisher: store, EndpointsOnly: true, ClusterID: "remote", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src)
	snap := waitFor(t, store.Store, "the remote endpoint", func(s *model.Snapshot) bool {
		svc := s.Service("echo.ns.svc.cluster.local")
		return svc != nil && len(svc.Endpoints[80]) == 1
	})
	if ep := snap.Service("echo.ns.svc.cluster.local").Endpoints[80][0]; ep.Cluster != "remote" || ep.Labels[model.ClusterLabel] != "remote" {
		t.Errorf("endpoint %+v names no cluster", ep)
	}
	if n := kube.disc.called(); n != 0 {
		t.Errorf("discovery asked %d times", n)
	}
	eventually(t, "the source synced", src.HasSynced)
}
