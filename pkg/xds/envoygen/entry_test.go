package envoygen

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const entries = `
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: app}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}, {name: https, number: 443, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr, namespace: app}
spec:
  hosts: [rr.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{name: https, number: 443, protocol: HTTPS}]
  endpoints: [{address: a.rr.example.com}, {address: b.rr.example.com}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: any, namespace: app}
spec:
  hosts: ["*.any.example.com"]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{name: tcp, number: 8443, protocol: TCP, targetPort: 443}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: app}
spec:
  hosts: [vm.internal]
  addresses: [240.0.0.10]
  location: MESH_INTERNAL
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/app/sa/vm-extra]
  ports: [{name: http, number: 80, protocol: HTTP}, {name: tcp-db, number: 5432, protocol: TCP}]
  endpoints:
  - {address: 10.3.0.1, serviceAccount: vm}
  - {address: 10.3.0.2}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-static, namespace: app}
spec:
  hosts: [static.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.1, labels: {security.istio.io/tlsMode: istio}}]
`

// TestServiceEntryClusters: each resolution gets Istio's cluster type,
// DNS ones their endpoints inline; auto-mTLS applies to a MESH_INTERNAL
// entry's endpoints that accept it, with the entry's subjectAltNames
// among the SANs, and never to a MESH_EXTERNAL one's.
func TestServiceEntryClusters(t *testing.T) {
	snap := modeltest.Load(t, manifests+entries)
	c := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp)
	for name, want := range map[string]cluster.Cluster_DiscoveryType{
		"outbound|80||api.example.com":            cluster.Cluster_STRICT_DNS,
		"outbound|443||api.example.com":           cluster.Cluster_STRICT_DNS,
		"outbound|443||rr.example.com":            cluster.Cluster_LOGICAL_DNS,
		"outbound|8443||*.any.example.com":        cluster.Cluster_ORIGINAL_DST,
		"outbound|80||vm.internal":                cluster.Cluster_EDS,
		"outbound|80||static.example.com":         cluster.Cluster_EDS,
		"outbound|5432||vm.internal":              cluster.Cluster_EDS,
		"outbound|80||echo.app.svc.cluster.local": cluster.Cluster_EDS,
	} {
		cl := c.clusters[name]
		if cl == nil {
			t.Errorf("no cluster %s", name)
			continue
		}
		if cl.GetType() != want {
			t.Errorf("%s: type %s, want %s", name, cl.GetType(), want)
		}
	}
	api := c.clusters["outbound|80||api.example.com"]
	if eps := api.GetLoadAssignment().GetEndpoints(); len(eps) != 1 || eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "api.example.com" ||
		api.GetDnsLookupFamily() != cluster.Cluster_V4_ONLY || api.GetTypedDnsResolverConfig() == nil {
		t.Errorf("api.example.com's DNS cluster: %v", api)
	}
	if api.TransportSocket != nil || len(api.TransportSocketMatches) != 0 {
		t.Error("a MESH_EXTERNAL entry gets auto-mTLS")
	}
	if _, ok := c.endpoints["outbound|80||api.example.com"]; ok {
		t.Error("a DNS cluster's endpoints are also sent over EDS")
	}
	rr := c.clusters["outbound|443||rr.example.com"]
	if eps := rr.GetLoadAssignment().GetEndpoints(); len(eps) != 1 || len(eps[0].LbEndpoints) != 1 ||
		eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "a.rr.example.com" {
		t.Errorf("a LOGICAL_DNS cluster has its first endpoint alone: %v", rr.GetLoadAssignment())
	}
	if any := c.clusters["outbound|8443||*.any.example.com"]; any.GetOriginalDstLbConfig().GetUpstreamPortOverride().GetValue() != 443 {
		t.Errorf("the NONE entry's targetPort is not the upstream port: %v", any)
	}
	if st := c.clusters["outbound|80||static.example.com"]; st.TransportSocket != nil || len(st.TransportSocketMatches) != 0 {
		t.Error("a MESH_EXTERNAL entry's endpoint marked tlsMode istio gets auto-mTLS")
	}

	vm := c.clusters["outbound|80||vm.internal"]
	if len(vm.TransportSocketMatches) != 2 {
		t.Fatalf("a MESH_INTERNAL entry has auto-mTLS: %v", vm)
	}
	var sans []string
	for _, m := range upstreamTLSOfMatch(t, vm).GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.GetMatcher().GetExact())
	}
	if want := []string{"spiffe://cluster.local/ns/app/sa/vm", "spiffe://cluster.local/ns/app/sa/vm-extra"}; !slices.Equal(sans, want) {
		t.Errorf("SANs %v, want %v", sans, want)
	}
	eps := c.endpoints["outbound|80||vm.internal"].GetEndpoints()[0].LbEndpoints
	if len(eps) != 2 || eps[0].GetMetadata() == nil || eps[1].GetMetadata() != nil {
		t.Errorf("the endpoint with a service account accepts mTLS, the other not: %v", eps)
	}
}

// TestServiceEntryListenersAndRoutes: HTTP ports are virtual hosts of the
// port's route; a TCP port listens on the entry's address, or, without
// one, on 0.0.0.0, where TLS ports choose the host by SNI and what none
// matches goes where unknown traffic goes.
func TestServiceEntryListenersAndRoutes(t *testing.T) {
	snap := modeltest.Load(t, manifests+entries)
	for _, registryOnly := range []bool{false, true} {
		c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{RegistryOnly: registryOnly}}, snap, sleepInApp)
		fallback := passthroughCluster
		if registryOnly {
			fallback = blackholeCluster
		}
		var domains []string
		for _, vh := range c.routes["80"].GetVirtualHosts() {
			domains = append(domains, vh.GetDomains()...)
		}
		for _, want := range []string{"api.example.com", "vm.internal", "240.0.0.10", "static.example.com"} {
			if !slices.Contains(domains, want) {
				t.Errorf("route 80 has no domain %s: %v", want, domains)
			}
		}
		if l := c.listeners["240.0.0.10_5432"]; l == nil || chainTarget(t, l.FilterChains[0]) != "tcp:outbound|5432||vm.internal" {
			t.Errorf("the entry's address listens for its TCP port: %v", l)
		}
		l := c.listeners["0.0.0.0_443"]
		if l == nil {
			t.Fatalf("no listener 0.0.0.0_443: %v", keys(c.listeners))
		}
		got := map[string]string{}
		for _, fc := range l.FilterChains {
			got[fc.GetFilterChainMatch().GetServerNames()[0]] = chainTarget(t, fc)
		}
		if got["api.example.com"] != "tcp:outbound|443||api.example.com" || got["rr.example.com"] != "tcp:outbound|443||rr.example.com" || len(got) != 2 {
			t.Errorf("SNI chains: %v", got)
		}
		if def := chainTarget(t, l.DefaultFilterChain); def != "tcp:"+fallback {
			t.Errorf("no SNI matched: %s, want %s", def, fallback)
		}
		if !slices.Contains(listenerFilterNames(l), tlsInspectorName) {
			t.Error("SNI chains without the TLS inspector")
		}
		if l := c.listeners["0.0.0.0_8443"]; l == nil || chainTarget(t, l.FilterChains[0]) != "tcp:outbound|8443||*.any.example.com" {
			t.Errorf("a TCP entry without address: %v", l)
		}
		if l := c.listeners["0.0.0.0_80"]; chainTarget(t, l.DefaultFilterChain) != "tcp:"+fallback {
			t.Errorf("what is not HTTP on an HTTP port goes to %s, want %s", chainTarget(t, l.DefaultFilterChain), fallback)
		}
	}
}

// upstreamTLSOfMatch is the TLS context of cl's first socket match, the
// auto-mTLS one.
func upstreamTLSOfMatch(t *testing.T, cl *cluster.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	up := &tlsv3.UpstreamTlsContext{}
	if err := cl.TransportSocketMatches[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(up); err != nil {
		t.Fatal(err)
	}
	return up
}

// TestServiceEntryExportTo: an entry is seen by the namespaces its
// exportTo names ("." its own), else by those of the mesh's
// defaultServiceExportTo, else by every one.
func TestServiceEntryExportTo(t *testing.T) {
	exported := func(exportTo string) string {
		return manifests + `
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: web}
spec:
  hosts: [api.example.com]
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}, {name: tls, number: 443, protocol: TLS}]
` + exportTo
	}
	for name, tc := range map[string]struct {
		exportTo    string
		meshDefault []string
		namespace   string
		sees        bool
	}{
		"no exportTo: everywhere":                   {namespace: "app", sees: true},
		"exportTo . from another namespace":         {exportTo: `  exportTo: ["."]`, namespace: "app"},
		"exportTo . from its own":                   {exportTo: `  exportTo: ["."]`, namespace: "web", sees: true},
		"exportTo the client's namespace":           {exportTo: `  exportTo: [app]`, namespace: "app", sees: true},
		"exportTo ~":                                {exportTo: `  exportTo: ["~"]`, namespace: "web"},
		"exportTo *":                                {exportTo: `  exportTo: ["*"]`, namespace: "app", sees: true, meshDefault: []string{"."}},
		"the mesh default . from another namespace": {meshDefault: []string{"."}, namespace: "app"},
		"the mesh default . from its own":           {meshDefault: []string{"."}, namespace: "web", sees: true},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, exported(tc.exportTo)).WithExportDefaults(tc.meshDefault, nil)
			p := &Proxy{Namespace: tc.namespace, IPs: []string{"10.0.0.9"}}
			c := generate(t, &Generator{TrustDomain: td}, snap, p)
			_, cluster := c.clusters["outbound|80||api.example.com"]
			_, sni := c.listeners["0.0.0.0_443"]
			vhost := false
			for _, vh := range c.routes["80"].GetVirtualHosts() {
				vhost = vhost || slices.Contains(vh.GetDomains(), "api.example.com")
			}
			if cluster != tc.sees || sni != tc.sees || vhost != tc.sees {
				t.Errorf("cluster %t, listener %t, virtual host %t; want %t", cluster, sni, vhost, tc.sees)
			}
			named := (&Generator{TrustDomain: td}).Generate(snap, p, resource.ClusterType,
				[]string{"outbound|80||api.example.com"}, false)
			if (len(named) == 1) != tc.sees {
				t.Errorf("asked by name: %d clusters", len(named))
			}
		})
	}
}
