package envoygen

import (
	"slices"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// networkedSnapshot has service echo.app with an endpoint on net1, one on
// net2 and one of no known network.
func networkedSnapshot() *model.Snapshot {
	ep := func(addr, network string) model.Endpoint {
		return model.Endpoint{Address: addr, Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: network,
			Labels: map[string]string{model.NetworkLabel: network, model.TLSModeLabel: "istio"}}
	}
	svc := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{80: {ep("10.0.0.1", "net1"), ep("10.1.0.1", "net2"), ep("10.2.0.1", "")}}}
	return model.Build("v1", model.Options{}, model.Resources{Services: []*model.Service{svc}})
}

func TestAProxyGetsOnlyTheEndpointsOfItsNetwork(t *testing.T) {
	snap := networkedSnapshot()
	g := &Generator{TrustDomain: td}
	const name = "outbound|80||echo.app.svc.cluster.local"
	addrs := func(cla *endpoint.ClusterLoadAssignment) (out []string) {
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		slices.Sort(out)
		return out
	}
	tests := map[string]struct {
		labels map[string]string
		want   []string
	}{
		"a proxy of net1 gets net1's endpoints and those of no network": {
			labels: map[string]string{model.NetworkLabel: "net1"}, want: []string{"10.0.0.1", "10.2.0.1"},
		},
		"a proxy of net2 gets net2's": {
			labels: map[string]string{model.NetworkLabel: "net2"}, want: []string{"10.1.0.1", "10.2.0.1"},
		},
		"a proxy of no known network gets every endpoint, as in Istio": {
			want: []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"},
		},
	}
	keys := map[string]string{}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			p := &Proxy{Namespace: "app", Labels: tc.labels, IPs: []string{"10.0.0.9"}}
			c := generate(t, g, snap, p)
			if got := addrs(c.endpoints[name]); !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
			for _, r := range g.Generate(snap, p, resource.EndpointType, []string{name}, false) {
				if other, ok := keys[r.Key]; ok {
					t.Errorf("shares its load assignment's key with %q", other)
				}
				keys[r.Key] = tname
			}
		})
	}
}
