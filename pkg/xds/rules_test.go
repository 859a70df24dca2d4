package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// rulesManifests are n services alternating between namespaces a and b,
// each with an HTTP and a TCP port, and extra.
func rulesManifests(n int, extra string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc-%d, namespace: %s}\nspec:\n  clusterIP: 10.96.2.%d\n  selector: {app: svc-%d}\n  ports: [{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 9000}]\n",
			i, []string{"a", "b"}[i%2], i+1, i)
	}
	return b.String() + extra
}

// settled waits until every proxy has been brought up to the push state in
// force for every type it follows and has no response queued, then returns
// by node ID the nonce of the last response of each type sent to it.
func settled(t *testing.T, h *harness) map[string]map[string]string {
	t.Helper()
	st := h.srv.state.Load()
	out := map[string]map[string]string{}
	waitFor(t, "every proxy brought up to the push, nothing queued", func() bool {
		for _, p := range h.srv.proxies() {
			p.mu.Lock()
			current := len(p.pending) == 0
			for _, l := range p.last {
				current = current && l.basis.seq == st.seq
			}
			for _, d := range p.delta {
				current = current && d.basis.seq == st.seq
			}
			nonces := map[string]string{}
			for typeURL, s := range p.sent {
				nonces[typeURL] = s.nonce
			}
			out[p.node.GetId()] = nonces
			p.mu.Unlock()
			if !current {
				return false
			}
		}
		return true
	})
	return out
}

// TestRuleChangesReachOnlyTheProxiesThatSeeThem: over both ADS variants,
// each VirtualService or DestinationRule change is sent to the proxies
// whose namespace sees it, as the types that read it alone, and the push
// generates a handful of resources, not every proxy's configuration.
func TestRuleChangesReachOnlyTheProxiesThatSeeThem(t *testing.T) {
	const services = 20
	vs := func(exportTo string) string {
		return `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-0, namespace: a}
spec:
  hosts: [svc-0]
  exportTo: [` + exportTo + `]
  http: [{timeout: 3s, route: [{destination: {host: svc-0}}]}]
`
	}
	const dr = `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-0, namespace: a}
spec:
  host: svc-0
  exportTo: ["."]
  subsets: [{name: v1, labels: {version: v1}}]
`
	const wildcard = `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b-plaintext, namespace: istio-system}
spec:
  host: "*.b.svc.cluster.local"
  exportTo: [a]
  trafficPolicy: {tls: {mode: DISABLE}}
`
	const gatewayOnly = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-1, namespace: b}
spec:
  hosts: [svc-1]
  gateways: [gw]
  http: [{route: [{destination: {host: svc-1}}]}]
`
	const tcp = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-3, namespace: b}
spec:
  hosts: [svc-3]
  exportTo: ["."]
  tcp:
  - route:
    - {destination: {host: svc-3, port: {number: 9000}}, weight: 60}
    - {destination: {host: svc-1, port: {number: 9000}}, weight: 40}
`
	// Each step's manifests, what the proxies of a and of b must be sent
	// (types), and what they must not.
	steps := []struct {
		what          string
		rules         string
		a, b          []string
		notA, notB    []string
		maxRegenerate int
	}{
		{"a VirtualService private to a", vs(`"."`), []string{typeRoute}, nil, []string{typeCluster, typeListener, typeEndpoint}, modelTypes, 15},
		{"exported to every namespace", vs(`"*"`), nil, []string{typeRoute}, modelTypes, []string{typeCluster, typeListener, typeEndpoint}, 15},
		// A state of the world client subscribing to new load
		// assignments is answered all it subscribes to.
		{"a DestinationRule with a subset, private to a", vs(`"*"`) + dr, []string{typeCluster}, nil, []string{typeListener}, modelTypes, 60},
		{"a root namespace rule for every service of b, exported to a", vs(`"*"`) + dr + wildcard, []string{typeCluster}, nil, []string{typeListener}, modelTypes, 60},
		{"a VirtualService bound to a gateway alone", vs(`"*"`) + dr + wildcard + gatewayOnly, nil, nil, modelTypes, modelTypes, 0},
		{"tcp routes private to b", vs(`"*"`) + dr + wildcard + gatewayOnly + tcp, nil, []string{typeListener}, modelTypes, []string{typeRoute}, 15},
	}
	pods := []*meshPod{
		{name: "svc-0-1", ns: "a", svc: "svc-0", sa: "svc-0", ip: "10.1.0.1"},
		{name: "svc-2-1", ns: "a", svc: "svc-2", sa: "svc-2", ip: "10.1.0.2"},
		{name: "svc-1-1", ns: "b", svc: "svc-1", sa: "svc-1", ip: "10.1.0.3"},
		{name: "svc-3-1", ns: "b", svc: "svc-3", sa: "svc-3", ip: "10.1.0.4"},
	}
	for _, sotw := range []bool{false, true} {
		t.Run(map[bool]string{false: "delta", true: "state of the world"}[sotw], func(t *testing.T) {
			h := newHarness(t, modeltest.Load(t, rulesManifests(services, "")), nil)
			var fleet []*fakeEnvoy
			for _, p := range pods {
				fleet = append(fleet, startFakeEnvoy(t, h, p, sotw))
			}
			converge := func(step string) {
				t.Helper()
				waitFor(t, step+": every proxy holds a full generation", func() bool {
					for _, e := range fleet {
						want, version := e.want(h)
						if want == nil || version != h.store.Current().Version || e.diff(want) != "" {
							return false
						}
					}
					return true
				})
			}
			converge("connecting")
			before, configs := settled(t, h), pushesOf(h, "config")
			st := h.srv.state.Load()
			st.mu.Lock()
			full := len(st.built)
			st.mu.Unlock()
			t.Logf("the first push generated %d resources", full)
			if full < 100 {
				t.Fatalf("the first push generated %d resources: too few to tell a full push from an incremental one", full)
			}
			for _, step := range steps {
				h.store.Publish(modeltest.Load(t, rulesManifests(services, step.rules)))
				converge(step.what)
				after := settled(t, h)
				st := h.srv.state.Load()
				st.mu.Lock()
				built := len(st.built)
				st.mu.Unlock()
				t.Logf("%s: %d resources generated", step.what, built)
				if built > step.maxRegenerate {
					t.Errorf("%s: %d resources generated, want at most %d: a full push?", step.what, built, step.maxRegenerate)
				}
				for i, e := range fleet {
					must, mustNot := step.a, step.notA
					if pods[i].ns == "b" {
						must, mustNot = step.b, step.notB
					}
					var sent []string
					for _, typeURL := range modelTypes {
						if after[e.nodeID][typeURL] != before[e.nodeID][typeURL] {
							sent = append(sent, typeURL)
						}
					}
					for _, typeURL := range must {
						if !slices.Contains(sent, typeURL) {
							t.Errorf("%s: %s was not sent %s", step.what, pods[i].name, shortType(typeURL))
						}
					}
					for _, typeURL := range mustNot {
						if slices.Contains(sent, typeURL) {
							t.Errorf("%s: %s was sent %s", step.what, pods[i].name, shortType(typeURL))
						}
					}
				}
				before = after
			}
			if n := pushesOf(h, "config") - configs; n != float64(len(steps)) {
				t.Errorf("%v config pushes, want %d", n, len(steps))
			}
		})
	}
}

// modelTypes are the types generated from the model.
var modelTypes = []string{typeCluster, typeEndpoint, typeListener, typeRoute}

func pushesOf(h *harness, trigger string) float64 {
	return testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues(trigger))
}
