package xds

import (
	"cmp"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// rulesGateways are two Gateways of namespace b: gw, which the connected
// router (labels istio: ingress) serves, and gw2, which another does.
const rulesGateways = `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: b}
spec:
  selector: {istio: ingress}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw2, namespace: b}
spec:
  selector: {istio: other}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
`

// TestRuleChangesSpareProxylessClientsAndRoutersThatDoNotSeeThem: after a
// VirtualService or DestinationRule change, a proxyless gRPC client that
// does not see it (exportTo, its Sidecar) and a router whose Gateways
// neither bind the changed VirtualServices nor route to the changed
// DestinationRules' hosts generate nothing and are sent nothing; those
// that see it are sent what changed.
func TestRuleChangesSpareProxylessClientsAndRoutersThatDoNotSeeThem(t *testing.T) {
	const services = 8
	vs := func(name, ns, host, exportTo, gateways, to string) string {
		return "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  hosts: [" + host + "]\n" +
			"  exportTo: [" + exportTo + "]\n  gateways: [" + gateways + "]\n  http: [{timeout: 3s, route: [{destination: {host: " + to + "}}]}]\n"
	}
	dr := func(name, ns, host, exportTo, mode string) string {
		return "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  host: " + host + "\n" +
			"  exportTo: [" + exportTo + "]\n  trafficPolicy: {tls: {mode: " + mode + "}}\n"
	}
	// The client of a is scoped by its Sidecar to a's services alone.
	const sidecarA = "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: a}\nspec:\n  egress: [{hosts: [\"./*\"]}]\n"
	var (
		otherGateway = vs("other-gw", "b", "svc-1.b.svc.cluster.local", `"*"`, "gw2", "svc-1.b.svc.cluster.local")
		privateToA   = vs("svc-0", "a", "svc-0.a.svc.cluster.local", `"."`, "mesh", "svc-0.a.svc.cluster.local")
		hiddenFromA  = vs("svc-3", "b", "svc-3.b.svc.cluster.local", `"*"`, "mesh", "svc-3.b.svc.cluster.local")
		drPrivateToA = dr("svc-2", "a", "svc-2.a.svc.cluster.local", `"."`, "ISTIO_MUTUAL")
		routerVS     = vs("ingress", "b", "shop.example.com", `"*"`, "gw", "svc-5.b.svc.cluster.local")
		routedDR     = dr("svc-5", "b", "svc-5.b.svc.cluster.local", `"*"`, "ISTIO_MUTUAL")
	)
	// Each client subscribes to 8 resources (2 services, 4 types), all
	// of which it generates again when it sees a change; the router
	// regenerates its listener and route (2), and after a
	// DestinationRule the clusters that name (at most 6: 2 ports, and
	// the inbound clusters of the service's workloads).
	steps := []struct {
		what     string
		rules    string
		sent     map[string][]string // by proxy: the types it must be sent
		min, max int                 // resources generated
	}{
		{"a VirtualService bound to another router's Gateway", otherGateway, nil, 0, 0},
		{"a VirtualService private to a, outside the router's Gateways", otherGateway + privateToA, map[string][]string{"a": {typeRoute}}, 1, 8},
		{"a VirtualService of b that a's Sidecar does not import", otherGateway + privateToA + hiddenFromA, map[string][]string{"b": {typeRoute}}, 1, 8},
		{"a DestinationRule private to a", otherGateway + privateToA + hiddenFromA + drPrivateToA, map[string][]string{"a": {typeCluster}}, 1, 8},
		{"a VirtualService bound to the router's Gateway", otherGateway + privateToA + hiddenFromA + drPrivateToA + routerVS, map[string][]string{"router": {typeRoute}}, 1, 2},
		// Seen by every client (exported everywhere), a's too, which
		// is sent nothing: its Sidecar keeps svc-5 from it.
		{"a DestinationRule of a host the router routes to", otherGateway + privateToA + hiddenFromA + drPrivateToA + routerVS + routedDR,
			map[string][]string{"router": {typeCluster}, "b": {typeCluster}}, 1, 8 + 8 + 2 + 6},
	}
	base := rulesManifests(services, rulesGateways+sidecarA)
	h := newHarness(t, modeltest.Load(t, base), nil)
	subscribe := func(id string, req *discovery.DiscoveryRequest, names map[string][]string) {
		t.Helper()
		st := h.stream(id)
		first := true
		for _, typeURL := range []string{typeCluster, typeEndpoint, typeListener, typeRoute} {
			ns, ok := names[typeURL]
			if !ok {
				continue
			}
			r := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: ns}
			if first {
				r.Node, first = req.GetNode(), false
			}
			if err := st.Send(r); err != nil {
				t.Fatal(err)
			}
			resp := recv(t, st)
			if len(resp.GetResources()) == 0 {
				t.Fatalf("%s: no %s", id, shortType(typeURL))
			}
			if typeURL == typeCluster && ns == nil {
				// A router asks for the load assignments of its EDS
				// clusters, as Envoy does, or its listeners and routes
				// wait for it (warming.go).
				for _, a := range resp.GetResources() {
					c := unmarshal[*cluster.Cluster](t, a, &cluster.Cluster{})
					if c.GetType() == cluster.Cluster_EDS {
						names[typeEndpoint] = append(names[typeEndpoint], cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName()))
					}
				}
			}
			if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: ns, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
		// Acknowledge every push, subscribing to the same names, until
		// the stream ends with the test.
		go func() {
			for {
				resp, err := st.Recv()
				if err != nil {
					return
				}
				ack := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names[resp.GetTypeUrl()], VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
				if st.Send(ack) != nil {
					return
				}
			}
		}()
	}
	grpcNames := func(ns string, svcs ...int) map[string][]string {
		out := map[string][]string{}
		for _, i := range svcs {
			host := "svc-" + string(rune('0'+i)) + "." + ns + ".svc.cluster.local"
			out[typeListener] = append(out[typeListener], host+":80")
			out[typeRoute] = append(out[typeRoute], host+":80")
			out[typeCluster] = append(out[typeCluster], "outbound|80||"+host)
			out[typeEndpoint] = append(out[typeEndpoint], "outbound|80||"+host)
		}
		return out
	}
	nodes := map[string]string{}
	aNode, bNode := testNode("a", "client", nil), testNode("b", "client", nil)
	subscribe("spiffe://cluster.local/ns/a/sa/client", &discovery.DiscoveryRequest{Node: aNode}, grpcNames("a", 0, 2))
	subscribe("spiffe://cluster.local/ns/b/sa/client", &discovery.DiscoveryRequest{Node: bNode}, grpcNames("b", 3, 5))
	router := routerNode("b", "ingress", "10.0.3.1", map[string]any{"istio": "ingress"}, nil)
	subscribe("spiffe://cluster.local/ns/b/sa/ingress", &discovery.DiscoveryRequest{Node: router},
		map[string][]string{typeCluster: nil, typeEndpoint: nil, typeListener: nil, typeRoute: {"http.80"}})
	nodes["a"], nodes["b"], nodes["router"] = aNode.GetId(), bNode.GetId(), router.GetId()

	before := settled(t, h)
	for _, step := range steps {
		seq := h.srv.state.Load().seq
		h.store.Publish(modeltest.Load(t, base+step.rules))
		waitFor(t, step.what+": pushed", func() bool { return h.srv.state.Load().seq > seq })
		after := settled(t, h)
		st := h.srv.state.Load()
		st.mu.Lock()
		built := len(st.built)
		st.mu.Unlock()
		t.Logf("%s: %d resources generated", step.what, built)
		if built < step.min || built > step.max {
			t.Errorf("%s: %d resources generated, want %d to %d", step.what, built, step.min, step.max)
		}
		for who, id := range nodes {
			var sent []string
			for _, typeURL := range modelTypes {
				if after[id][typeURL] != before[id][typeURL] {
					sent = append(sent, typeURL)
				}
			}
			for _, typeURL := range step.sent[who] {
				if !slices.Contains(sent, typeURL) {
					t.Errorf("%s: %s was not sent %s", step.what, who, shortType(typeURL))
				}
			}
			for _, typeURL := range sent {
				if !slices.Contains(step.sent[who], typeURL) {
					t.Errorf("%s: %s was sent %s", step.what, who, shortType(typeURL))
				}
			}
		}
		before = after
	}
}
