package interop

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/mesh"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// The upstream protocol of every cluster, judged against Istio's
// generator on the same objects: a workload serving gRPC, gRPC-Web,
// HTTP/2, HTTP, TCP and undeclared ports (by name and by appProtocol),
// seen from its own sidecar (inbound clusters) and from a client's
// (outbound clusters), with and without DestinationRule h2UpgradePolicy,
// useClientProtocol and connection limits, and the mesh's h2UpgradePolicy.

// protocolWorld adds app/proto to sidecarWorld.
const protocolWorld = sidecarWorld + `
---
apiVersion: v1
kind: Service
metadata: {name: proto, namespace: app}
spec:
  clusterIP: 10.96.0.60
  clusterIPs: [10.96.0.60]
  selector: {app: proto}
  ports:
  - {name: grpc-api, port: 81, targetPort: 8081, protocol: TCP}
  - {name: grpc-web, port: 82, targetPort: 8082, protocol: TCP}
  - {name: http2-h, port: 83, targetPort: 8083, protocol: TCP}
  - {name: api, port: 84, targetPort: 8084, protocol: TCP, appProtocol: grpc}
  - {name: h2c, port: 85, targetPort: 8085, protocol: TCP, appProtocol: kubernetes.io/h2c}
  - {name: http-plain, port: 86, targetPort: 8086, protocol: TCP}
  - {name: tcp-raw, port: 87, targetPort: 8087, protocol: TCP}
  - {name: data, port: 88, targetPort: 8088, protocol: TCP}
  - {port: 89, targetPort: 8089, protocol: TCP, name: x}
---
apiVersion: v1
kind: Pod
metadata:
  name: proto-1
  namespace: app
  uid: 00000000-0000-0000-0000-0000000b0101
  labels: {app: proto, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: proto
  nodeName: n1
  containers:
  - name: app
    image: proto
    ports: [{containerPort: 8081}, {containerPort: 8082}, {containerPort: 8083}, {containerPort: 8084}, {containerPort: 8085}, {containerPort: 8086}, {containerPort: 8087}, {containerPort: 8088}, {containerPort: 8089}]
status:
  phase: Running
  podIP: 10.0.0.60
  podIPs: [{ip: 10.0.0.60}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: proto-abcde
  namespace: app
  labels: {kubernetes.io/service-name: proto}
addressType: IPv4
endpoints:
- addresses: [10.0.0.60]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: proto-1, namespace: app}
ports:
- {name: grpc-api, port: 8081, protocol: TCP}
- {name: grpc-web, port: 8082, protocol: TCP}
- {name: http2-h, port: 8083, protocol: TCP}
- {name: api, port: 8084, protocol: TCP, appProtocol: grpc}
- {name: h2c, port: 8085, protocol: TCP, appProtocol: kubernetes.io/h2c}
- {name: http-plain, port: 8086, protocol: TCP}
- {name: tcp-raw, port: 8087, protocol: TCP}
- {name: data, port: 8088, protocol: TCP}
- {name: x, port: 8089, protocol: TCP}
`

func protoRule(body string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: proto, namespace: app}\nspec:\n  host: proto.app.svc.cluster.local\n" + body
}

type protocolScenario struct {
	name  string
	istio string
	// h2Upgrade is mesh config h2UpgradePolicy UPGRADE.
	h2Upgrade bool
}

var protocolScenarios = []protocolScenario{{
	name: "ports' own protocols, no rule",
}, {
	name:  "the rule upgrades every port to HTTP/2",
	istio: protoRule("  trafficPolicy: {connectionPool: {http: {h2UpgradePolicy: UPGRADE}}}\n"),
}, {
	name:      "the mesh upgrades HTTP ports; the rule keeps one port and a subset HTTP/1.1",
	h2Upgrade: true,
	istio: protoRule(`  trafficPolicy:
    portLevelSettings:
    - port: {number: 86}
      connectionPool: {http: {h2UpgradePolicy: DO_NOT_UPGRADE}}
  subsets:
  - {name: v1, labels: {app: proto}, trafficPolicy: {connectionPool: {http: {h2UpgradePolicy: DO_NOT_UPGRADE}}}}
  - {name: v2, labels: {app: proto}}
`),
}, {
	name: "the client's protocol, limits and HTTP options from the rule",
	istio: protoRule(`  trafficPolicy:
    connectionPool:
      http: {useClientProtocol: true, idleTimeout: 30s, maxRequestsPerConnection: 7, http2MaxRequests: 100, maxConcurrentStreams: 9}
      tcp: {maxConnections: 11, connectTimeout: 3s, maxConnectionDuration: 600s, tcpKeepalive: {time: 60s, interval: 10s, probes: 3}}
    portLevelSettings:
    - port: {number: 81}
      connectionPool: {http: {idleTimeout: 20s, maxConcurrentStreams: 5, http2KeepAlive: {interval: 10s, timeout: 2s}}}
    - port: {number: 87}
      tls: {mode: ISTIO_MUTUAL}
  subsets:
  - {name: v1, labels: {app: proto}, trafficPolicy: {connectionPool: {http: {maxRetries: 4}}}}
`),
}, {
	name: "a workload-selected rule for its clients only; a Sidecar's inbound pool over the rule's",
	istio: protoRule("  trafficPolicy: {connectionPool: {http: {idleTimeout: 40s, h2UpgradePolicy: UPGRADE}}}\n") + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: proto-sleep, namespace: app}
spec:
  host: proto.app.svc.cluster.local
  workloadSelector: {matchLabels: {app: sleep}}
  trafficPolicy: {connectionPool: {http: {useClientProtocol: true}, tcp: {maxConnections: 2}}}
` + sidecarRes("app", "proto", "  workloadSelector: {labels: {app: proto}}\n  inboundConnectionPool: {tcp: {maxConnections: 3}}\n"),
}}

// TestClusterProtocolMatchesIstio compares every cluster's upstream
// protocol and HTTP options, TLS and type with Istio's, for the workload
// (inbound clusters) and a client (outbound clusters), and the names of
// every resource, then runs Istio's simulator on calls to each port.
func TestClusterProtocolMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	objects := decodeKube(t, protocolWorld)
	pods := map[string]bool{}
	for _, sc := range protocolScenarios {
		t.Run(sc.name, func(t *testing.T) {
			cfgs, _, err := crd.ParseInputs(sc.istio)
			if err != nil {
				t.Fatalf("crd.ParseInputs: %v", err)
			}
			for i := range cfgs {
				cfgs[i].Domain = "cluster.local"
			}
			m := mesh.DefaultMeshConfig()
			if sc.h2Upgrade {
				m.H2UpgradePolicy = meshconfig.MeshConfig_UPGRADE
			}
			s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: protocolWorld, MeshConfig: m})
			snap := ourSnapshot(t, objects, sc.istio)
			g := &envoygen.Generator{
				TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain),
				Mesh:        envoygen.Mesh{H2Upgrade: sc.h2Upgrade},
			}
			for _, o := range objects {
				pod, ok := o.(*corev1.Pod)
				if !ok || (pod.Name != "proto-1" && pod.Name != "sleep-1") {
					continue
				}
				t.Run(pod.Name, func(t *testing.T) {
					ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}})
					istioSim := simulation.NewSimulation(t, s, istioProxy(s, pod))
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours.listeners, ours.clusters, ours.routes
					d := &differences{t: t, scenario: sc.name, used: map[int]bool{}}
					compareResourceNames(d, istioSim, &ourSim)
					compareClusterTLS(d, istioSim, &ourSim)
					compareClusterLimits(d, istioSim.Clusters, ours.clusters)
					n := protoClusters(istioSim.Clusters)
					if n == 0 {
						t.Fatal("Istio generated no cluster of app/proto: the case compares nothing")
					}
					pods[pod.Name] = true
					checkConfigValid(t, ours)
				})
			}
		})
	}
	if !pods["proto-1"] || !pods["sleep-1"] {
		t.Errorf("compared pods %v, want proto-1 (inbound) and sleep-1 (outbound)", pods)
	}
}

// protoClusters counts app/proto's clusters: outbound to it, or the
// inbound ones of its ports.
func protoClusters(cs []*clusterv3.Cluster) int {
	n := 0
	for _, c := range cs {
		if name := c.GetName(); strings.HasPrefix(name, "inbound|80") || strings.HasSuffix(name, "|proto.app.svc.cluster.local") {
			n++
		}
	}
	return n
}

// compareClusterLimits compares, for every cluster both generate, its
// type, endpoints, upstream bind, connect timeout, circuit breakers, TCP
// keepalive and common HTTP options (inboundClusterString), and how it
// chooses its upstream HTTP version (upstreamProtocol).
func compareClusterLimits(d *differences, istio, ours []*clusterv3.Cluster) {
	d.t.Helper()
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range ours {
		byName[c.GetName()] = c
	}
	for _, ic := range istio {
		if oc, ok := byName[ic.GetName()]; ok {
			d.check("cluster "+ic.GetName(), inboundClusterString(d.t, ic), inboundClusterString(d.t, oc), "")
			d.check("cluster protocol "+ic.GetName(), upstreamProtocol(d.t, ic), upstreamProtocol(d.t, oc), "")
		}
	}
}

// upstreamProtocolOptions describes a cluster's HttpProtocolOptions but
// for its upstream HTTP options (auto SNI, compared by autoSNI): the
// upstream protocol (explicit HTTP/1.1 or HTTP/2 with its settings, or
// the client's) and the common HTTP options (idle timeout, requests per
// connection, connection duration); "none" without them, which is
// Envoy's HTTP/1.1.
func upstreamProtocolOptions(t *testing.T, c *clusterv3.Cluster) string {
	o := httpOptions(t, c)
	if o == nil {
		return "none"
	}
	o = proto.Clone(o).(*httpv3.HttpProtocolOptions)
	o.UpstreamHttpProtocolOptions = nil
	if proto.Size(o) == 0 {
		return "none"
	}
	return prototext.MarshalOptions{}.Format(o)
}
