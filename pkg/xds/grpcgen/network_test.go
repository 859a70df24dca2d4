package grpcgen

import (
	"slices"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

func TestAProxylessClientGetsOnlyTheEndpointsOfItsNetwork(t *testing.T) {
	ep := func(addr, network string) model.Endpoint {
		return model.Endpoint{Address: addr, Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: network}
	}
	svc := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports:     []model.Port{{Name: "grpc", Port: 7070, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{7070: {ep("10.0.0.1", "net1"), ep("10.1.0.1", "net2"), ep("10.2.0.1", "")}}}
	snap := model.Build("v1", model.Options{}, model.Resources{Services: []*model.Service{svc}})
	const name = "outbound|7070||echo.app.svc.cluster.local"
	tests := map[string]struct {
		network string
		view    []string // REQUESTED_NETWORK_VIEW
		want    []string
	}{
		"of net1":             {network: "net1", want: []string{"10.0.0.1", "10.2.0.1"}},
		"of no known network": {want: []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"}},
		"of no known network, with the view of net2, as Istio's": {view: []string{"net2"}, want: []string{"10.1.0.1", "10.2.0.1"}},
		"of no known network, with the view of both":             {view: []string{"net1", "net2"}, want: []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"}},
		"of no known network, with the view of no network":       {view: []string{}, want: []string{"10.2.0.1"}},
		"of net1, with the view of net2":                         {network: "net1", view: []string{"net2"}, want: []string{"10.2.0.1"}},
	}
	keys := map[string]bool{}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			p := &Proxy{Namespace: "app", Labels: map[string]string{"app": "client"}, NetworkView: tc.view}
			if tc.network != "" {
				p.Labels[model.NetworkLabel] = tc.network
			}
			cla := build[*endpoint.ClusterLoadAssignment](t, snap, p, resource.EndpointType, name)
			var got []string
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
			r := (&Generator{TrustDomain: td}).Generate(snap, p, resource.EndpointType, []string{name}, false)[0]
			if keys[r.Key] {
				t.Error("two networks or views share a load assignment's key")
			}
			keys[r.Key] = true
		})
	}
}
