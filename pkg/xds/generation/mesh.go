package generation

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// Mesh is one mesh configuration as generation reads it. A push
// state is built from a model snapshot and a Mesh; proxies generate
// with the Mesh of the push state they answer from.
type Mesh struct {
	Config *meshv1alpha1.MeshConfig // nil: Istio's defaults
	Keys   *keyfetch.JWKSSnapshot   // RequestAuthentication key sets; nil: none fetched
	Envoy  *envoygen.Generator
	GRPC   *grpcgen.Generator // proxyless gRPC's, with the same route settings
	set    Settings
}

// Settings are istiod's own settings that generation reads besides the
// mesh configuration: its flags, which do not change while it runs.
type Settings struct {
	TrustDomain             spiffeid.TrustDomain
	AllowInsecureSkipVerify bool
	AllowLoopbackHTTPJWKS   bool
	SidecarIngressTLS       bool
	ScopeGatewayToNamespace bool
	MeshNetworks            *model.MeshNetworks
}

// NewMesh is the generation of mesh configuration mc (nil: Istio's
// defaults) and RequestAuthentication key sets keys (nil: none fetched)
// under istiod's settings set.
func NewMesh(set Settings, mc *meshv1alpha1.MeshConfig, keys *keyfetch.JWKSSnapshot) *Mesh {
	m := envoyMesh(mc)
	m.AllowInsecureSkipVerify = set.AllowInsecureSkipVerify
	m.AllowLoopbackHTTPJWKS = set.AllowLoopbackHTTPJWKS
	m.SidecarIngressTLS = set.SidecarIngressTLS
	m.Networks = set.MeshNetworks
	g := &envoygen.Generator{TrustDomain: set.TrustDomain, Mesh: m, ScopeGatewayToNamespace: set.ScopeGatewayToNamespace}
	g.Telemetry = telemetry(mc)
	if keys != nil {
		g.Keys = keys
	}
	return &Mesh{Config: mc, Keys: keys, Envoy: g, GRPC: &grpcgen.Generator{TrustDomain: set.TrustDomain, Routes: m.Routes}, set: set}
}

// Settings are the settings m was made with.
func (m *Mesh) Settings() Settings { return m.set }

// OnlyNetworksDiffer reports whether m and o were made of the same mesh
// configuration, key sets and settings but meshNetworks: then they
// generate the same resources but load assignments, which read the
// network gateways.
func (m *Mesh) OnlyNetworksDiffer(o *Mesh) bool {
	if m == nil || o == nil || m.Config != o.Config || m.Keys != o.Keys {
		return false
	}
	a, b := m.set, o.set
	a.MeshNetworks, b.MeshNetworks = nil, nil
	return a == b
}

// envoyMesh is what the Envoy generator reads of mc, with Istio's
// defaults for what mc leaves unset: ALLOW_ANY, auto-mTLS on.
func envoyMesh(mc *meshv1alpha1.MeshConfig) envoygen.Mesh {
	policy := mc.GetOutboundTrafficPolicy()
	autoMTLS := mc.GetEnableAutoMtls()
	return envoygen.Mesh{
		RegistryOnly:       policy != nil && policy.GetMode() == meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY,
		DisableAutoMTLS:    autoMTLS != nil && !autoMTLS.GetValue(),
		H2Upgrade:          mc.GetH2UpgradePolicy() == meshv1alpha1.MeshConfig_UPGRADE,
		TrustDomainAliases: mc.GetTrustDomainAliases(),
		TLSDefaults: envoygen.TLSDefaults{
			ECDHCurves:         mc.GetTlsDefaults().GetEcdhCurves(),
			CipherSuites:       mc.GetTlsDefaults().GetCipherSuites(),
			MinProtocolVersion: minTLSVersion(mc.GetTlsDefaults().GetMinProtocolVersion()),
		},
		GatewayTopology: gatewayTopology(mc.GetDefaultConfig().GetGatewayTopology()),
		Routes: routes.Options{
			DefaultRetry:    mc.GetDefaultHttpRetryPolicy(),
			DefaultExportTo: mc.GetDefaultVirtualServiceExportTo(),
		},
	}
}

// minTLSVersion is Envoy's name for tlsDefaults.minProtocolVersion;
// TLS_AUTO leaves Envoy's default.
func minTLSVersion(v meshv1alpha1.MeshConfig_TLSConfig_TLSProtocol) tlsv3.TlsParameters_TlsProtocol {
	switch v {
	case meshv1alpha1.MeshConfig_TLSConfig_TLSV1_2:
		return tlsv3.TlsParameters_TLSv1_2
	case meshv1alpha1.MeshConfig_TLSConfig_TLSV1_3:
		return tlsv3.TlsParameters_TLSv1_3
	}
	return tlsv3.TlsParameters_TLS_AUTO
}

// gatewayTopology is what routers read of the mesh's default
// gatewayTopology. (A pod's own proxy.istio.io/config is not read.)
func gatewayTopology(t *meshv1alpha1.Topology) envoygen.GatewayTopology {
	out := envoygen.GatewayTopology{NumTrustedProxies: t.GetNumTrustedProxies(), ProxyProtocol: t.GetProxyProtocol() != nil}
	if d, ok := map[meshv1alpha1.ForwardClientCertDetails]hcm.HttpConnectionManager_ForwardClientCertDetails{
		meshv1alpha1.ForwardClientCertDetails_SANITIZE:            hcm.HttpConnectionManager_SANITIZE,
		meshv1alpha1.ForwardClientCertDetails_FORWARD_ONLY:        hcm.HttpConnectionManager_FORWARD_ONLY,
		meshv1alpha1.ForwardClientCertDetails_APPEND_FORWARD:      hcm.HttpConnectionManager_APPEND_FORWARD,
		meshv1alpha1.ForwardClientCertDetails_SANITIZE_SET:        hcm.HttpConnectionManager_SANITIZE_SET,
		meshv1alpha1.ForwardClientCertDetails_ALWAYS_FORWARD_ONLY: hcm.HttpConnectionManager_ALWAYS_FORWARD_ONLY,
	}[t.GetForwardClientCertDetails()]; ok {
		out.ForwardClientCertDetails = &d
	}
	return out
}

// Derive is snap as generation sees it under m: mesh-wide policies are
// those of m's root namespace (the model's own when m names none), and
// Services and DestinationRules without exportTo are exported as m's
// defaultServiceExportTo and defaultDestinationRuleExportTo say.
func (m *Mesh) Derive(snap *model.Snapshot) *model.Snapshot {
	return snap.WithRootNamespace(m.Config.GetRootNamespace()).
		WithExportDefaults(m.Config.GetDefaultServiceExportTo(), m.Config.GetDefaultDestinationRuleExportTo())
}

// Func generates the resources of one type for one proxy.
type Func func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource

// Scope is what generation reads of the workload w in snap: in a registry
// of pods, the labels and addresses of the pod the node names when it
// runs under the node's service account; else what the node claims. key
// is all of it, after the generator's name: proxies with equal keys get
// equal resources from one push state. Envoy sidecars generate with m's
// generator.
func (m *Mesh) Scope(w *identity.Workload, snap *model.Snapshot) (key string, gen Func) {
	labels, ips := w.In(snap)
	if !w.Envoy {
		gp := &grpcgen.Proxy{Namespace: w.Namespace, Labels: labels, NetworkView: w.NetworkView}
		return "grpc\x00" + labelsKey(w.Namespace, labels) + "\x00" + grpcgen.ScopeKey(snap, gp) + viewKey(w.NetworkView), func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource {
			return m.GRPC.Generate(snap, gp, typeURL, names, wildcard)
		}
	}
	ep := &envoygen.Proxy{Namespace: w.Namespace, Labels: labels, IPs: ips, Router: w.Router, Unprivileged: w.Unprivileged, Network: w.Network, NetworkView: w.NetworkView}
	return "envoy\x00" + m.Envoy.Scope(snap, ep), func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource {
		return m.Envoy.Generate(snap, ep, typeURL, names, wildcard)
	}
}

// EndpointsKey is the key under which the workload w shares load
// assignments in snap with other proxies (envoygen's EndpointScope): ""
// when it shares them only within its scope.
func (m *Mesh) EndpointsKey(w *identity.Workload, snap *model.Snapshot) string {
	if !w.Envoy {
		return ""
	}
	labels, _ := w.In(snap)
	return "envoy\x00" + m.Envoy.EndpointScope(snap, &envoygen.Proxy{Namespace: w.Namespace, Labels: labels, Network: w.Network, NetworkView: w.NetworkView})
}

// labelsKey is a namespace and labels as one unambiguous string.
func labelsKey(namespace string, labels map[string]string) string {
	b := appendField(nil, namespace)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b = appendField(appendField(b, k), labels[k])
	}
	return string(b)
}

// appendField appends s length-prefixed, as the push state's keys are
// written, so that names a proxy chooses cannot make two keys equal.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// viewKey is the part of a proxyless client's scope key its network view
// makes: "" without a view, distinct from a view of no network.
func viewKey(view []string) string {
	if view == nil {
		return ""
	}
	return "\x00view:" + strings.Join(view, ",")
}
