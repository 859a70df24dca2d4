package grpcgen

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

const grpcEntries = `
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: app}
spec:
  hosts: [vm.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/app/sa/vm-extra]
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  endpoints: [{address: 10.3.0.1, serviceAccount: vm}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: app}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 443, protocol: GRPC}]
  endpoints: [{address: 192.0.2.1, serviceAccount: ext}]
`

// TestServiceEntriesReachProxylessClients: a ServiceEntry host is a
// service as any other, over CDS and EDS: auto-mTLS with its
// subjectAltNames among the SANs when MESH_INTERNAL, never when
// MESH_EXTERNAL.
func TestServiceEntriesReachProxylessClients(t *testing.T) {
	snap := load(t, grpcEntries)
	build[*listener.Listener](t, snap, client, ListenerType, "vm.internal:7070")
	vm := build[*cluster.Cluster](t, snap, client, ClusterType, "outbound|7070||vm.internal")
	if vm.GetTransportSocket() == nil {
		t.Fatal("a MESH_INTERNAL entry's sidecar endpoint gets no mTLS")
	}
	up := &tlsv3.UpstreamTlsContext{}
	if err := vm.GetTransportSocket().GetTypedConfig().UnmarshalTo(up); err != nil {
		t.Fatal(err)
	}
	var sans []string
	vc := up.GetCommonTlsContext().GetValidationContext()
	for _, m := range vc.GetMatchSubjectAltNames() { //nolint:staticcheck // what gRPC reads
		sans = append(sans, m.GetExact())
	}
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.GetMatcher().GetExact())
	}
	slices.Sort(sans)
	if want := []string{"spiffe://cluster.local/ns/app/sa/vm", "spiffe://cluster.local/ns/app/sa/vm-extra"}; !slices.Equal(slices.Compact(sans), want) {
		t.Errorf("SANs %v, want %v", sans, want)
	}
	cla := build[*endpoint.ClusterLoadAssignment](t, snap, client, EndpointType, "outbound|7070||vm.internal")
	if eps := cla.GetEndpoints(); len(eps) != 1 || eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "10.3.0.1" {
		t.Errorf("endpoints %v", cla)
	}
	if ext := build[*cluster.Cluster](t, snap, client, ClusterType, "outbound|443||api.example.com"); ext.GetTransportSocket() != nil {
		t.Error("a MESH_EXTERNAL entry gets auto-mTLS")
	}
}

// TestServiceEntryExportToProxyless: an entry exported to its own
// namespace alone is not served to a client of another.
func TestServiceEntryExportToProxyless(t *testing.T) {
	snap := load(t, `
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: private, namespace: web}
spec:
  hosts: [private.example.com]
  resolution: STATIC
  exportTo: ["."]
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  endpoints: [{address: 10.4.0.1}]
`)
	g := &Generator{TrustDomain: td}
	for _, tc := range []struct {
		namespace string
		sees      bool
	}{{"app", false}, {"web", true}} {
		p := &Proxy{Namespace: tc.namespace}
		for _, typeURL := range []string{ListenerType, ClusterType, EndpointType} {
			name := "private.example.com:7070"
			if typeURL != ListenerType {
				name = "outbound|7070||private.example.com"
			}
			if got := len(g.Generate(snap, p, typeURL, []string{name}, false)) == 1; got != tc.sees {
				t.Errorf("%s in %s: served %t, want %t", name, tc.namespace, got, tc.sees)
			}
			all := g.Generate(snap, p, typeURL, nil, true)
			if got := slices.ContainsFunc(all, func(r Resource) bool { return r.Name == name }); got != tc.sees {
				t.Errorf("%s in %s by wildcard: served %t, want %t", name, tc.namespace, got, tc.sees)
			}
		}
	}
}
