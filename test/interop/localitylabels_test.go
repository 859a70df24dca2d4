package interop

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// TestTopologyLabelSubsetsMatchIstio: DestinationRule subsets that select
// the labels Istio adds to every endpoint of a pod (its locality's
// topology.kubernetes.io/region and zone and topology.istio.io/subzone,
// from the pod's istio-locality label or else its node's labels, and its
// node's name as kubernetes.io/hostname) give the same load assignments as
// Istio's generator, for pods on labelled nodes, on an unlabelled node, on
// no node, and with a locality label of their own.
func TestTopologyLabelSubsetsMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	node := nodeYAML
	pod := func(name, ip, node, labels string) string { return podYAML(name, ip, node, "echo", labels) }
	local := strings.Join([]string{
		node("node-a", "topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1, topology.istio.io/subzone: s1"),
		node("node-b", "topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z2"),
		node("node-c", "failure-domain.beta.kubernetes.io/region: r2, failure-domain.beta.kubernetes.io/zone: z3"),
		node("node-d", "kubernetes.io/os: linux"),
		mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.1", "echo-2": "10.10.0.2", "echo-3": "10.10.0.3"}),
		pod("echo-1", "10.10.0.1", "node-a", "app: echo"),
		pod("echo-2", "10.10.0.2", "node-b", "app: echo"),
		pod("echo-3", "10.10.0.3", "node-d", "app: echo, istio-locality: r3.z9.s9"),
		mcService("other", 8080, map[string]string{"other-1": "10.10.0.4", "other-2": "10.10.0.5"}),
		pod("other-1", "10.10.0.4", "node-c", "app: other"),
		pod("other-2", "10.10.0.5", "", "app: other"),
		pod("sleep", "10.10.0.9", "node-a", "app: sleep"),
	}, "---\n")
	rules := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  subsets:
  - {name: r1, labels: {topology.kubernetes.io/region: r1}}
  - {name: z1, labels: {topology.kubernetes.io/zone: z1}}
  - {name: z2, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z2}}
  - {name: s1, labels: {topology.istio.io/subzone: s1}}
  - {name: s9, labels: {topology.istio.io/subzone: s9, topology.kubernetes.io/region: r3}}
  - {name: node-a, labels: {kubernetes.io/hostname: node-a}}
  - {name: node-d, labels: {kubernetes.io/hostname: node-d}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: other, namespace: app}
spec:
  host: other.app.svc.cluster.local
  subsets:
  - {name: r2, labels: {topology.kubernetes.io/region: r2}}
  - {name: z3, labels: {topology.kubernetes.io/zone: z3}}
  - {name: node-c, labels: {kubernetes.io/hostname: node-c}}
  - {name: unscheduled, labels: {app: other}}
`
	s, store := twoClusterModels(t, local, "", rules)
	sleep := podOf(t, local, "sleep")
	proxy := istioProxy(s, sleep)
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
	ours := ourResources(t, g, store.Current(), &envoygen.Proxy{Namespace: sleep.Namespace, Labels: sleep.Labels, IPs: []string{sleep.Status.PodIP}})
	istio := s.Endpoints(proxy)
	d := &differences{t: t, scenario: "topology labels", used: map[int]bool{}, list: []allowedDifference{}}
	compareEndpoints(d, istio, ours.endpoints)
	// The comparison proves something only if Istio's subsets select by
	// these labels: each subset named here has the endpoints listed.
	want := map[string]string{
		"r1": "10.10.0.1:8080, 10.10.0.2:8080", "z1": "10.10.0.1:8080", "z2": "10.10.0.2:8080", "s1": "10.10.0.1:8080",
		"s9": "10.10.0.3:8080", "node-a": "10.10.0.1:8080", "node-d": "10.10.0.3:8080",
		"r2": "10.10.0.4:8080", "z3": "10.10.0.4:8080", "node-c": "10.10.0.4:8080", "unscheduled": "10.10.0.4:8080, 10.10.0.5:8080",
	}
	seen := 0
	for _, cla := range istio {
		parts := strings.Split(cla.GetClusterName(), "|")
		if len(parts) != 4 || parts[1] != "80" || parts[2] == "" {
			continue
		}
		w, ok := want[parts[2]]
		if !ok {
			continue
		}
		seen++
		if got := endpointsString(cla); addressesOf(got) != w {
			t.Errorf("Istio's subset %s: %s, want %s", parts[2], got, w)
		}
	}
	if seen != len(want) {
		t.Errorf("Istio has %d of the %d subsets' load assignments", seen, len(want))
	}
}

// addressesOf is the addresses of an endpointsString, comma separated.
func addressesOf(s string) string {
	var out []string
	for _, e := range strings.Split(strings.Trim(s, "[]"), ", ") {
		if a, _, ok := strings.Cut(e, " "); ok {
			out = append(out, a)
		}
	}
	return strings.Join(out, ", ")
}

// nodeYAML is a Node named name with labels (a YAML flow mapping's
// content).
func nodeYAML(name, labels string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: %s, labels: {%s}}\n", name, labels)
}

// podYAML is a running sidecar pod of namespace app, running as sa on
// node, with labels (a YAML flow mapping's content).
func podYAML(name, ip, node, sa, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: app, uid: uid-%s, labels: {security.istio.io/tlsMode: istio, %s}}
spec: {serviceAccountName: %s, nodeName: "%s", containers: [{name: app, image: app}]}
status: {phase: Running, podIP: %s, podIPs: [{ip: %s}]}
`, name, name, labels, sa, node, ip, ip)
}
