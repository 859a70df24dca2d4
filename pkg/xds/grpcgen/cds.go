package grpcgen

import (
	"fmt"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	meshpolicy "github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

func (g *Generator) cluster(snap *model.Snapshot, p *Proxy, cv clientView, name string) *Resource {
	host, subset, portNum, ok := parseClusterName(name)
	if !ok {
		return nil
	}
	svc, port, ok := lookup(cv, hostPort(host, portNum))
	if !ok {
		return nil
	}
	var sans []string
	var mtls bool
	if subset == "" {
		sans, mtls = g.upstreamMTLS(snap, p, svc, port)
	} else {
		dr, ss := subsetOf(snap, p, host, subset)
		if ss == nil {
			return nil // no rule the client sees defines the subset
		}
		sans, mtls = g.subsetMTLS(snap, dr, ss, svc, port)
	}
	key := fmt.Sprintf("cds|%s|%t|%s", name, mtls, strings.Join(sans, ","))
	return &Resource{Name: name, Key: key, Build: func() (proto.Message, error) {
		c := &cluster.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
			LbPolicy:             cluster.Cluster_ROUND_ROBIN,
		}
		if mtls {
			ts, err := upstreamTLS(sans)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			c.TransportSocket = ts
		}
		return c, nil
	}}
}

// subsetOf is the subset named of the DestinationRule that applies to p
// for host, with the rule; nil when there is none.
func subsetOf(snap *model.Snapshot, p *Proxy, host, name string) (*networkingv1.DestinationRule, *networkingv1.Subset) {
	dr := snap.DestinationRuleFor(host, p.Namespace, p.Labels)
	if dr == nil || dr.Spec == nil {
		return nil, nil
	}
	for _, ss := range dr.Spec.GetSubsets() {
		if ss.GetName() == name {
			return dr.Spec, ss
		}
	}
	return nil, nil
}

// subsetMTLS is upstreamMTLS for the endpoints of subset ss: its TLS
// setting (port-level first) over the rule's, else auto-mTLS over its
// endpoints.
func (g *Generator) subsetMTLS(snap *model.Snapshot, dr *networkingv1.DestinationRule, ss *networkingv1.Subset, svc *model.Service, port model.Port) ([]string, bool) {
	sans, auto := g.endpointTLSOf(snap, svc, subsetEndpoints(svc.Endpoints[port.Port], ss))
	return decideMTLS(meshpolicy.ClientTLS(dr, ss, port.Port), sans, auto)
}

// decideMTLS is the choice of a DestinationRule's TLS settings, tls
// (nil for none), where it is ISTIO_MUTUAL or DISABLE; else auto-mTLS's:
// mTLS toward sans when auto.
func decideMTLS(tls *networkingv1.ClientTLSSettings, sans []string, auto bool) ([]string, bool) {
	if tls != nil {
		switch tls.GetMode() {
		case networkingv1.ClientTLSSettings_ISTIO_MUTUAL:
			return sans, true
		case networkingv1.ClientTLSSettings_DISABLE:
			return nil, false
		}
	}
	if auto {
		return sans, true
	}
	return nil, false
}

// subsetEndpoints are the endpoints of eps that subset ss selects.
func subsetEndpoints(eps []model.Endpoint, ss *networkingv1.Subset) []model.Endpoint {
	var out []model.Endpoint
	for _, ep := range eps {
		if model.Matches(ss.GetLabels(), ep.Labels) {
			out = append(out, ep)
		}
	}
	return out
}

// upstreamMTLS decides whether the client uses Istio mTLS toward svc:port
// and which SPIFFE IDs the server may present. The DestinationRule that
// applies to p (model's DestinationRuleFor, as for Envoy sidecars) decides
// by ISTIO_MUTUAL or DISABLE; otherwise auto-mTLS: mTLS when an
// endpoint is labelled tlsMode=istio and its PeerAuthentication is not
// DISABLE. gRPC sets TLS per cluster, not per endpoint, so a cluster mixing
// both kinds uses mTLS and fails closed toward plaintext-only endpoints.
func (g *Generator) upstreamMTLS(snap *model.Snapshot, p *Proxy, svc *model.Service, port model.Port) ([]string, bool) {
	sans, auto := g.endpointTLS(snap, svc, port)
	var tls *networkingv1.ClientTLSSettings
	if dr := snap.DestinationRuleFor(svc.Hostname, p.Namespace, p.Labels); dr != nil {
		tls = meshpolicy.ClientTLS(dr.Spec, nil, port.Port)
	}
	return decideMTLS(tls, sans, auto)
}

// endpointTLS is what a cluster reads of the endpoints of svc:port: the
// SPIFFE IDs they run as, and whether auto-mTLS chooses mTLS toward them.
func (g *Generator) endpointTLS(snap *model.Snapshot, svc *model.Service, port model.Port) (sans []string, auto bool) {
	return g.endpointTLSOf(snap, svc, svc.Endpoints[port.Port])
}

// endpointTLSOf is endpointTLS of the endpoints eps of svc.
func (g *Generator) endpointTLSOf(snap *model.Snapshot, svc *model.Service, eps []model.Endpoint) (sans []string, auto bool) {
	sans = make([]string, 0, len(eps))
	for _, ep := range eps {
		id, err := spiffeid.FromSegments(g.TrustDomain, "ns", ep.Namespace, "sa", ep.ServiceAccount)
		if err == nil {
			sans = append(sans, id.String())
		}
		if ep.TLSMode() == "istio" && snap.MTLSMode(ep.Namespace, ep.Labels, ep.Port) != model.MTLSDisable {
			auto = true
		}
	}
	if e := svc.Entry; e != nil {
		// A ServiceEntry's subjectAltNames are its servers' identities
		// too; auto-mTLS never applies outside the mesh.
		sans = append(sans, e.SubjectAltNames...)
		auto = auto && !e.External
	}
	slices.Sort(sans)
	return slices.Compact(sans), auto
}

// EndpointsReadElsewhere reports whether resources other than load
// assignments read something different of the endpoints of the service
// of hostname in old and new, two snapshots that differ in endpoints
// only. When they do not, an endpoint change is the load assignments'
// alone. Only clusters read endpoints, through endpointTLS (of a subset:
// of the endpoints it selects, so a service with subsets always counts).
func (g *Generator) EndpointsReadElsewhere(old, new *model.Snapshot, hostname string) bool {
	os, ns := old.Service(hostname), new.Service(hostname)
	if os == nil || ns == nil {
		return true
	}
	// A subset cluster's identities are those of the endpoints its labels
	// select, which an endpoint change may move in or out of it.
	for _, dr := range new.DestinationRulesOf(hostname) {
		if len(dr.Spec.GetSubsets()) > 0 {
			return true
		}
	}
	for _, port := range ns.Ports {
		oldSANs, oldAuto := g.endpointTLS(old, os, port)
		newSANs, newAuto := g.endpointTLS(new, ns, port)
		if oldAuto != newAuto || !slices.Equal(oldSANs, newSANs) {
			return true
		}
	}
	return false
}

// ReadsAuthorization reports whether the resource of typeURL named name
// reads AuthorizationPolicies: server listeners alone (their RBAC
// filters).
func ReadsAuthorization(typeURL, name string) bool {
	return typeURL == ListenerType && strings.HasPrefix(name, InboundPrefix)
}

// ReadsService reports whether the resource of typeURL named name reads
// the service of hostname: its listeners and routes "<host>[:<port>]",
// its clusters and their load assignments.
func ReadsService(typeURL, name, hostname string) bool {
	switch typeURL {
	case ClusterType, EndpointType:
		return resource.ClusterHost(name) == hostname
	case ListenerType, RouteType:
		host, _, _ := strings.Cut(name, ":")
		return host == hostname
	}
	return false
}
