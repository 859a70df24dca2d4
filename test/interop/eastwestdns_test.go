package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// eastWestEntries are ServiceEntries an east-west gateway sees: of the
// mesh and resolved by DNS (endpoints that accept Istio mTLS and one that
// does not; a round-robin one; one whose hosts are its endpoints, none
// with mTLS, resolved DNS and DNS_ROUND_ROBIN), one resolved STATIC, one outside the mesh, and a
// DestinationRule with a subset of the first; with a Gateway whose
// AUTO_PASSTHROUGH server admits their hosts.
const eastWestEntries = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: app}
spec:
  hosts: [db.internal.example]
  location: MESH_INTERNAL
  resolution: DNS
  ports: [{number: 5432, name: tcp-db, protocol: TCP}, {number: 8080, name: http, protocol: HTTP, targetPort: 9080}]
  endpoints:
  - {address: db-1.internal.example, labels: {security.istio.io/tlsMode: istio, version: v1}, locality: r1/z1}
  - {address: db-2.internal.example, labels: {security.istio.io/tlsMode: istio, version: v2}, weight: 3, locality: r1/z2}
  - {address: db-3.internal.example, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cache, namespace: app}
spec:
  hosts: [cache.internal.example]
  location: MESH_INTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 6379, name: tcp-redis, protocol: TCP}]
  endpoints:
  - {address: cache-1.internal.example, labels: {security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bare, namespace: app}
spec:
  hosts: [bare.internal.example]
  location: MESH_INTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bare-rr, namespace: app}
spec:
  hosts: [bare-rr.internal.example]
  location: MESH_INTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: app}
spec:
  hosts: [vm.internal.example]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 7000, name: tcp, protocol: TCP}]
  endpoints: [{address: 10.30.0.1, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: outside, namespace: app}
spec:
  hosts: [api.outside.example]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: app}
spec:
  host: db.internal.example
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local", "*.example"]
`

// TestEastWestDNSServiceEntriesMatchIstio: the east-west gateway's
// SNI-DNAT clusters of ServiceEntries resolved by DNS are Istio's: a
// STRICT_DNS or LOGICAL_DNS cluster per port and subset, plaintext, its
// endpoints inline and only those that accept Istio mTLS; none for an
// entry outside the mesh; the listener chains to them as Istio's.
func TestEastWestDNSServiceEntriesMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	local := mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.1"}) + "---\n" +
		mcPod("echo-1", "echo", "10.10.0.1", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		eastWestPod
	cfgs, _, err := crd.ParseInputs(eastWestEntries)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: local})

	store := model.NewStore()
	stop := runKubesource(t, decodeKube(t, local), eastWestEntries, kubesource.Config{Publisher: store, ClusterID: compareLocal})
	defer stop()
	snap := store.Current()
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}

	gwPod := podOf(t, local, "eastwest-1")
	router := s.SetupProxy(&istiomodel.Proxy{
		Type: istiomodel.Router, ID: gwPod.Name + "." + gwPod.Namespace, ConfigNamespace: gwPod.Namespace,
		IPAddresses: []string{gwPod.Status.PodIP}, Labels: gwPod.Labels,
		Metadata: &istiomodel.NodeMetadata{Namespace: gwPod.Namespace, ServiceAccount: gwPod.Spec.ServiceAccountName, Labels: gwPod.Labels,
			ClusterID: compareLocal},
	})
	ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: gwPod.Namespace, Labels: gwPod.Labels, IPs: []string{gwPod.Status.PodIP}, Router: true})
	// Istio's LOGICAL_DNS SNI-DNAT cluster of an entry none of whose
	// endpoints accepts mTLS has no host, which Envoy refuses ("LOGICAL_DNS
	// clusters must have a single locality_lb_endpoint and a single
	// lb_endpoint"), failing the gateway's whole cluster update: Bulwark
	// leaves it, and its chain, out.
	const bareRR = "outbound_.443_._.bare-rr.internal.example"
	allowed := []allowedDifference{
		{subject: regexp.MustCompile(`^SNI-DNAT cluster ` + regexp.QuoteMeta(bareRR) + `$`), istio: "LOGICAL_DNS eds= lb=LEAST_REQUEST tls=plaintext", ours: "-",
			reason: "a LOGICAL_DNS cluster without a host, which Envoy refuses"},
		{subject: regexp.MustCompile(`^east-west chain ` + regexp.QuoteMeta(bareRR) + `$`),
			istio: "alpn=[istio istio-peer-exchange istio-http/1.0 istio-http/1.1 istio-h2] transport= tls=false filters=[envoy.filters.network.tcp_proxy(cluster=" + bareRR + " stat=" + bareRR + ")]",
			ours:  "-", reason: "the chain to that cluster"},
	}
	d := &differences{t: t, scenario: "eastwestdns", used: map[int]bool{}, list: allowed}

	istioClusters := s.Clusters(router)
	compareEastWestClusters(d, istioClusters, ours.clusters)
	dns := 0
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range ours.clusters {
		byName[c.GetName()] = c
	}
	for _, ic := range istioClusters {
		if ic.GetName() == bareRR {
			for _, l := range ic.GetLoadAssignment().GetEndpoints() {
				if len(l.GetLbEndpoints()) > 0 {
					t.Errorf("Istio's %s has a host now: the allowed difference may go", bareRR)
				}
			}
		}
		if !strings.HasPrefix(ic.GetName(), "outbound_.") || ic.GetType() == clusterv3.Cluster_EDS {
			continue
		}
		dns++
		oc, ok := byName[ic.GetName()]
		if !ok {
			continue // compareEastWestClusters said so
		}
		d.check("SNI-DNAT DNS cluster "+ic.GetName(), dnsClusterShape(ic), dnsClusterShape(oc), "")
	}
	if dns < 4 {
		t.Fatalf("Istio's east-west gateway has %d SNI-DNAT DNS clusters: the comparison would prove little", dns)
	}
	compareEastWestListener(d, s.Listeners(router), ours.listeners)
	compareWeightedEndpoints(d, "east-west gateway: ", s.Endpoints(router), ours.endpoints)
	for i, a := range allowed {
		if !d.used[i] {
			t.Errorf("allowed difference not seen: %s", a.reason)
		}
	}
	if got := envoygen.SNIDNATLeftOut(snap); len(got) != 1 || !strings.Contains(got[0], "app/bare-rr port 443") {
		t.Errorf("reported left out: %q, want bare-rr's port 443 alone", got)
	}
	t.Logf("%d SNI-DNAT DNS clusters compared", dns)
}

// dnsClusterShape is what a DNS cluster says beyond compareEastWestClusters'
// shape: its lookup family, resolver, refresh, and its inline endpoints
// with weights and mTLS marks.
func dnsClusterShape(c *clusterv3.Cluster) string {
	return fmt.Sprintf("family=%s resolver=%s refresh=%s ttl=%v endpoints=[%s]", c.GetDnsLookupFamily(),
		c.GetTypedDnsResolverConfig().GetName(), c.GetDnsRefreshRate().AsDuration(), c.GetRespectDnsTtl(), //nolint:staticcheck // Istio's fields
		weightedEndpoints(c.GetLoadAssignment()))
}
