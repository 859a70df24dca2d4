package interop

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	networkingapi "istio.io/api/networking/v1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/host"
	"istio.io/istio/pkg/config/mesh"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// partnerWorld adds to sidecarWorld a namespace "partner" with three
// services: api (a meshed pod), internal (exported to its own namespace
// only) and shared (exported to "app" only).
const partnerWorld = `
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: partner}
spec:
  clusterIP: 10.96.2.10
  clusterIPs: [10.96.2.10]
  selector: {app: api}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: api-1
  namespace: partner
  uid: 00000000-0000-0000-0000-0000000a9101
  labels: {app: api, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: api-sa
  nodeName: n1
  containers:
  - name: app
    image: api
    ports: [{containerPort: 8080}]
status:
  phase: Running
  podIP: 10.0.2.5
  podIPs: [{ip: 10.0.2.5}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-abcde
  namespace: partner
  labels: {kubernetes.io/service-name: api}
addressType: IPv4
endpoints:
- addresses: [10.0.2.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: api-1, namespace: partner}
ports:
- {name: http, port: 8080, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata:
  name: internal
  namespace: partner
  annotations: {networking.istio.io/exportTo: "."}
spec:
  clusterIP: 10.96.2.20
  clusterIPs: [10.96.2.20]
  selector: {app: api}
  ports:
  - {name: http, port: 81, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata:
  name: shared
  namespace: partner
  annotations: {networking.istio.io/exportTo: "app, partner"}
spec:
  clusterIP: 10.96.2.30
  clusterIPs: [10.96.2.30]
  selector: {app: api}
  ports:
  - {name: http, port: 82, targetPort: 8080, protocol: TCP}
`

// drClient is a client workload whose choice of DestinationRule is
// compared: a namespace and labels.
type drClient struct {
	namespace string
	labels    map[string]string
}

var drClients = []drClient{
	{"app", map[string]string{"app": "sleep"}},
	{"app", map[string]string{"app": "sleep", "version": "v2"}},
	{"other", map[string]string{"app": "backend"}},
	{"partner", map[string]string{"app": "api"}},
	{"istio-system", map[string]string{"app": "ops"}},
}

var drHosts = []string{
	"echo.app.svc.cluster.local", "sleep.app.svc.cluster.local", "backend.other.svc.cluster.local",
	"api.partner.svc.cluster.local", "internal.partner.svc.cluster.local", "shared.partner.svc.cluster.local",
}

// dr is a DestinationRule document.
func dr(ns, name, created, body string) string {
	return fmt.Sprintf(`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %s, namespace: %s, creationTimestamp: %q}
spec:
%s`, name, ns, created, body)
}

const (
	t1 = "2026-01-01T00:00:01Z"
	t2 = "2026-01-01T00:00:02Z"
	t3 = "2026-01-01T00:00:03Z"
)

// drCases are the DestinationRule configurations compared, each with the
// mesh's defaultServiceExportTo and defaultDestinationRuleExportTo.
var drCases = []struct {
	name                string
	rules               string
	serviceExportTo     []string
	destinationExportTo []string
}{
	{name: "no rules"},
	{name: "a rule of the service's namespace applies to every client", rules: dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a rule exported to its own namespace reaches its own clients only", rules: dr("app", "echo", t1, `
  host: echo.app.svc.cluster.local
  exportTo: ["."]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a rule exported to another namespace by name", rules: dr("app", "echo", t1, `
  host: echo
  exportTo: ["other"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a rule exported to other namespaces only, not its own", rules: dr("app", "echo", t1, `
  host: echo
  exportTo: ["partner", "other"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a rule exported to its own namespace and another", rules: dr("app", "echo", t1, `
  host: echo
  exportTo: [".", "partner"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a root namespace wildcard rule for a namespace's hosts", rules: dr("istio-system", "partner", t1, `
  host: "*.partner.svc.cluster.local"
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "the most specific wildcard of the root namespace wins", rules: dr("istio-system", "all", t1, `
  host: "*"
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}`) + dr("istio-system", "local", t1, `
  host: "*.local"
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("istio-system", "app", t1, `
  host: "*.app.svc.cluster.local"
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`) + dr("istio-system", "echo", t1, `
  host: echo.app.svc.cluster.local
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}`)},
	{name: "the client's namespace before the service's and the root's", rules: dr("other", "echo-from-other", t1, `
  host: echo.app.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}`) + dr("istio-system", "all", t1, `
  host: "*"
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "a wildcard of the client's namespace before an exact rule of the service's", rules: dr("other", "everything", t1, `
  host: "*.local"
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}`)},
	{name: "a more specific rule exported elsewhere hides a wildcard of its namespace", rules: dr("app", "echo", t1, `
  host: echo
  exportTo: ["partner"]
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("app", "app-wide", t1, `
  host: "*.app.svc.cluster.local"
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`) + dr("istio-system", "all", t1, `
  host: "*"
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}`)},
	{name: "rules for one host merge: the oldest traffic policy, subsets added", rules: dr("app", "b-newer", t2, `
  host: echo
  trafficPolicy: {tls: {mode: DISABLE}}
  subsets:
  - {name: v1, labels: {version: v2}}
  - {name: v2, labels: {version: v2}}`) + dr("app", "a-older", t1, `
  host: echo.app.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - {name: v1, labels: {version: v1}}`) + dr("app", "c-newest", t3, `
  host: echo
  subsets:
  - {name: v3, labels: {version: v3}}`)},
	{name: "rules of one host with different exportTo stay apart: the last applies", rules: dr("app", "a", t1, `
  host: echo
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}`) + dr("app", "b", t2, `
  host: echo
  exportTo: ["*"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a rule exported to more namespaces than another merges into it", rules: dr("app", "a", t1, `
  host: echo
  exportTo: ["other"]
  subsets: [{name: v1, labels: {version: v1}}]`) + dr("app", "b", t2, `
  host: echo
  exportTo: ["other", "partner"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a workload-selected rule for its namespace's matching clients", rules: dr("app", "canary", t2, `
  host: echo
  workloadSelector: {matchLabels: {version: v2}}
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "a workload-selected rule alone leaves other clients of its namespace without one", rules: dr("app", "canary", t1, `
  host: backend.other.svc.cluster.local
  workloadSelector: {matchLabels: {version: v2}}
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("other", "backend", t1, `
  host: backend
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "workload-selected rules merge when their selectors are equal", rules: dr("app", "s1", t1, `
  host: echo
  workloadSelector: {matchLabels: {app: sleep}}
  subsets: [{name: a, labels: {version: v1}}]`) + dr("app", "s2", t2, `
  host: echo
  workloadSelector: {matchLabels: {app: sleep}}
  trafficPolicy: {tls: {mode: DISABLE}}
  subsets: [{name: b, labels: {version: v2}}]`) + dr("app", "s3", t3, `
  host: echo
  workloadSelector: {matchLabels: {version: v2}}
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "a rule exported to its namespace merges into a workload-selected one", rules: dr("app", "selected", t1, `
  host: echo
  workloadSelector: {matchLabels: {version: v2}}
  subsets: [{name: a, labels: {version: v1}}]`) + dr("app", "private", t2, `
  host: echo
  exportTo: ["."]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "a workload-selected rule of the root namespace is for its own workloads", rules: dr("istio-system", "ops", t1, `
  host: "*"
  workloadSelector: {matchLabels: {app: ops}}
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("istio-system", "all", t2, `
  host: "*.local"
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "private root rules reach the root namespace's clients first", rules: dr("istio-system", "private", t1, `
  host: "*.local"
  exportTo: ["."]
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "mesh defaultDestinationRuleExportTo '.' keeps rules without exportTo home", destinationExportTo: []string{"."},
		rules: dr("app", "echo", t1, `
  host: echo
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("partner", "api", t1, `
  host: api
  exportTo: ["*"]
  trafficPolicy: {tls: {mode: DISABLE}}`) + dr("istio-system", "all", t1, `
  host: "*"
  trafficPolicy: {loadBalancer: {simple: RANDOM}}`)},
	{name: "a rule exported to a namespace that is neither the service's nor the root", rules: dr("app", "backend", t1, `
  host: backend.other.svc.cluster.local
  exportTo: ["partner"]
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "mesh defaultServiceExportTo '.' hides services from other namespaces", serviceExportTo: []string{"."},
		rules: dr("istio-system", "all", t1, `
  host: "*"
  trafficPolicy: {tls: {mode: DISABLE}}`)},
	{name: "mesh defaultServiceExportTo naming namespaces", serviceExportTo: []string{"app", "~"}},
}

// TestDestinationRuleSelectionMatchesIstio compares, for every case of
// drCases, every client of drClients and every host of drHosts, whether
// the client sees the service and which DestinationRule applies to it,
// merged, as Istio's sidecar scope chooses them
// (SidecarScope.DestinationRule over PushContext's index) and as
// model.DestinationRuleFor does on the snapshot kubesource builds from
// the same objects: the rules it comes from, in order, and its spec
// (host aside: Istio rewrites it resolved).
func TestDestinationRuleSelectionMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	objects := decodeKube(t, sidecarWorld+partnerWorld)
	compared := 0
	for _, tc := range drCases {
		t.Run(tc.name, func(t *testing.T) {
			s := drIstioServer(t, tc.rules, tc.serviceExportTo, tc.destinationExportTo)
			snap := ourSnapshot(t, objects, tc.rules).WithExportDefaults(tc.serviceExportTo, tc.destinationExportTo)
			for i, c := range drClients {
				proxy := s.SetupProxy(&istiomodel.Proxy{
					ID:              fmt.Sprintf("client-%d.%s", i, c.namespace),
					ConfigNamespace: c.namespace,
					IPAddresses:     []string{fmt.Sprintf("10.99.0.%d", i+1)},
					Labels:          c.labels,
					Metadata:        &istiomodel.NodeMetadata{Namespace: c.namespace, Labels: c.labels},
				})
				for _, h := range drHosts {
					want := istioChoice(proxy, h)
					got := ourChoice(snap, c, h)
					compared++
					if want != got {
						t.Errorf("client %s %v, host %s:\n  istio: %s\n  ours:  %s", c.namespace, c.labels, h, want, got)
					}
				}
			}
		})
	}
	if min := 15 * len(drClients) * len(drHosts); compared < min && !t.Failed() && len(drCases) >= 15 {
		t.Errorf("compared %d choices, want at least %d", compared, min)
	}
}

// drIstioServer is Istio's discovery server over the world and rules,
// with the mesh's export defaults.
func drIstioServer(t *testing.T, rules string, serviceExportTo, destinationExportTo []string) *xds.FakeDiscoveryServer {
	t.Helper()
	cfgs, _, err := crd.ParseInputs(rules)
	if err != nil {
		t.Fatalf("crd.ParseInputs: %v", err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	m := mesh.DefaultMeshConfig()
	m.DefaultServiceExportTo = serviceExportTo
	m.DefaultDestinationRuleExportTo = destinationExportTo
	return xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: sidecarWorld + partnerWorld, MeshConfig: m})
}

// istioChoice is what Istio's sidecar scope of proxy says of host.
func istioChoice(proxy *istiomodel.Proxy, h string) string {
	if proxy.SidecarScope.ServicesByHostname()[host.Name(h)] == nil {
		return "hidden"
	}
	cdr := proxy.SidecarScope.DestinationRule(istiomodel.TrafficDirectionOutbound, proxy, host.Name(h))
	if cdr == nil {
		return "none"
	}
	var from []string
	for _, f := range cdr.GetFrom() {
		from = append(from, f.Namespace+"/"+f.Name)
	}
	spec := cdr.GetRule().Spec.(*networkingapi.DestinationRule)
	return describeRule(from, spec)
}

// ourChoice is what model.DestinationRuleFor says of host for c.
func ourChoice(snap *model.Snapshot, c drClient, h string) string {
	if snap.VisibleService(h, c.namespace) == nil {
		return "hidden"
	}
	r := snap.DestinationRuleFor(h, c.namespace, c.labels)
	if r == nil {
		return "none"
	}
	from := r.From
	if from == nil {
		from = []model.Meta{r.Meta}
	}
	var names []string
	for _, m := range from {
		names = append(names, m.Namespace+"/"+m.Name)
	}
	return describeRule(names, r.Spec)
}

// describeRule is the rules a choice comes from and its spec, host aside.
func describeRule(from []string, spec *networkingapi.DestinationRule) string {
	c := proto.Clone(spec).(*networkingapi.DestinationRule)
	c.Host = ""
	text, _ := prototext.MarshalOptions{}.Marshal(c)
	return strings.Join(from, ",") + " {" + strings.Join(strings.Fields(string(text)), " ") + "}"
}
