package envoygen

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	cares "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// A service made of a ServiceEntry host (model.Entry) is served by the
// code that serves Kubernetes services, with these differences, as
// Istio's cluster builder makes them:
//   - resolution NONE: an ORIGINAL_DST cluster, as a headless service's
//     (headless.go), the port rewritten to the port's targetPort;
//   - resolution DNS: a STRICT_DNS cluster, DNS_ROUND_ROBIN a LOGICAL_DNS
//     one (its first endpoint alone), their endpoints inline (the
//     entry's, or its host), no load assignment over EDS;
//   - STATIC: an EDS cluster, as a Kubernetes service's;
//   - MESH_EXTERNAL: never auto-mTLS (tlsOf);
//   - the SANs of Istio mTLS to it add the entry's subjectAltNames
//     (serviceIdentities);
//   - a TCP port of an entry without addresses listens on
//     "0.0.0.0_<port>"; a TLS or HTTPS one there chooses the host by SNI.

// Istio's defaults for DNS clusters: mesh config dnsRefreshRate, and
// PILOT_DNS_CARES_UDP_MAX_QUERIES, PILOT_DNS_JITTER_DURATION.
const (
	dnsRefreshRate    = 60 * time.Second
	dnsUDPMaxQueries  = 100
	dnsJitter         = 100 * time.Millisecond
	caresResolverName = "envoy.network.dns_resolver.cares"
)

// external reports whether oc is a cluster of a MESH_EXTERNAL entry.
func (oc outboundCluster) external() bool { return oc.svc.Entry != nil && oc.svc.Entry.External }

// passthroughEntry reports whether oc is a cluster of an entry resolved
// NONE.
func (oc outboundCluster) passthroughEntry() bool {
	return oc.svc.Entry != nil && oc.svc.Entry.Resolution == networkingv1.ServiceEntry_NONE
}

// dnsType is the discovery type of a cluster of an entry resolved by DNS.
func (oc outboundCluster) dnsType() (cluster.Cluster_DiscoveryType, bool) {
	if oc.svc.Entry == nil {
		return 0, false
	}
	switch oc.svc.Entry.Resolution {
	case networkingv1.ServiceEntry_DNS:
		return cluster.Cluster_STRICT_DNS, true
	case networkingv1.ServiceEntry_DNS_ROUND_ROBIN:
		return cluster.Cluster_LOGICAL_DNS, true
	}
	return 0, false
}

// edsLoadAssignment reports whether oc's endpoints go over EDS.
func (oc outboundCluster) edsLoadAssignment() bool {
	_, dns := oc.dnsType()
	return !dns
}

// dnsLookupFamily is Istio's SelectDNSLookupFamily: IPv4 alone unless the
// proxy has an IPv6 address, then IPv6 alone, or both when it has both.
func (b *builder) dnsLookupFamily() cluster.Cluster_DnsLookupFamily {
	var v4, v6 bool
	for _, ip := range b.p.IPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			v4, v6 = v4 || a.Is4(), v6 || !a.Is4()
		}
	}
	switch {
	case v4 && v6:
		return cluster.Cluster_ALL
	case v6:
		return cluster.Cluster_V6_ONLY
	}
	return cluster.Cluster_V4_ONLY
}

// dnsCluster is the cluster r (oc's, as an EDS cluster) made a DNS one of
// type t, its endpoints inline.
func (b *builder) dnsCluster(r resource.Resource, oc outboundCluster, t cluster.Cluster_DiscoveryType) resource.Resource {
	family := b.dnsLookupFamily()
	k := r.Key + "|" + t.String() + "|" + family.String()
	if oc.dr != nil {
		k += "|" + oc.dr.Namespace + "/" + oc.dr.Name // the rule decides the endpoints' marks
	}
	return resource.Resource{Name: r.Name, Key: k, Build: func() (proto.Message, error) {
		c, err := decodeCluster(r)
		if err != nil {
			return nil, err
		}
		if c.GetType() == cluster.Cluster_STATIC {
			return c, nil // refused TLS: no endpoints at all
		}
		raw, err := b.loadAssignment(oc, nil) // DNS endpoints: no gateways
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
		}
		la := &endpoint.ClusterLoadAssignment{}
		if err := proto.Unmarshal(raw, la); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
		}
		if t == cluster.Cluster_LOGICAL_DNS && len(la.Endpoints) > 0 {
			// Envoy takes one host for a LOGICAL_DNS cluster. An SNI-DNAT
			// cluster's locality may have none left (no mTLS): it stays
			// empty, as Istio's.
			first := la.Endpoints[0]
			if len(first.LbEndpoints) > 0 {
				first.LbEndpoints = first.LbEndpoints[:1]
				first.LoadBalancingWeight = first.LbEndpoints[0].GetLoadBalancingWeight()
			}
			la.Endpoints = la.Endpoints[:1]
		}
		resolver, err := anypb.New(&cares.CaresDnsResolverConfig{UdpMaxQueries: wrapperspb.UInt32(dnsUDPMaxQueries)})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
		}
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: t}
		c.EdsClusterConfig = nil
		c.LoadAssignment = la
		c.DnsLookupFamily = family
		c.TypedDnsResolverConfig = &core.TypedExtensionConfig{Name: caresResolverName, TypedConfig: resolver}
		c.DnsRefreshRate = durationpb.New(dnsRefreshRate) //nolint:staticcheck // Istio's field; Envoy still reads it
		c.DnsJitter = durationpb.New(dnsJitter)           //nolint:staticcheck // as above
		c.RespectDnsTtl = true                            //nolint:staticcheck // as above
		return c, nil
	}}
}

// decodeCluster is the Cluster r holds.
func decodeCluster(r resource.Resource) (*cluster.Cluster, error) {
	if r.Build != nil {
		m, err := r.Build()
		if err != nil {
			return nil, err
		}
		if c, ok := m.(*cluster.Cluster); ok {
			return c, nil
		}
		return nil, fmt.Errorf("cluster %s: built %T", r.Name, m)
	}
	raw, err := r.Encode()
	if err != nil {
		return nil, err
	}
	c := &cluster.Cluster{}
	if err := proto.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", r.Name, err)
	}
	return c, nil
}

// entryListenerAddresses are the addresses an entry's TCP port listens on
// besides its addresses: "0.0.0.0" when it has none.
func entryListenerAddresses(svc *model.Service) []string {
	if svc.Entry == nil || len(svc.Addresses) > 0 {
		return nil
	}
	return []string{"0.0.0.0"}
}

// sniChosen reports whether connections to the entry port sp on
// "0.0.0.0" choose the entry by SNI: TLS and HTTPS ports, as Istio's
// buildSidecarOutboundTLSFilterChainOpts matches a service without an
// address by its hostname.
func sniChosen(svc *model.Service, sp model.Port) bool {
	if svc.Entry == nil || len(svc.Addresses) > 0 {
		return false
	}
	return strings.EqualFold(sp.Protocol, "TLS") || strings.EqualFold(sp.Protocol, "HTTPS")
}

// fallbackCluster is where outbound traffic to no known destination goes:
// PassthroughCluster, or BlackHoleCluster under REGISTRY_ONLY.
func (b *builder) fallbackCluster() string {
	if b.registryOnly() {
		return blackholeCluster
	}
	return passthroughCluster
}

// sniffedOnAnyAddress reports whether sp, of a ServiceEntry without
// addresses, declares no protocol: Istio sniffs it on "0.0.0.0_<port>",
// HTTP routed by the port's route, the rest to the entry.
func sniffedOnAnyAddress(svc *model.Service, sp model.Port) bool {
	return len(entryListenerAddresses(svc)) > 0 && protocolOf(sp) == protoAuto
}

// httpDefault is where "0.0.0.0_<port>", an HTTP port's listener, sends
// what is not plaintext HTTP: the first ServiceEntry (by hostname) without
// addresses whose TCP or undeclared port it is, as Istio makes that
// entry's chain the listener's default; else the fallback.
func (b *builder) httpDefault(port uint32) string {
	for _, svc := range b.listenerServices() {
		if len(entryListenerAddresses(svc)) == 0 {
			continue
		}
		for _, sp := range svc.Ports {
			if p := protocolOf(sp); sp.Port == port && (p == protoTCP || p == protoAuto) && !sniChosen(svc, sp) {
				return resource.ClusterName(svc.Hostname, "", port)
			}
		}
	}
	return b.fallbackCluster()
}
