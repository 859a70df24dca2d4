package xds

import (
	"time"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// MeshSource is the mesh configuration (Istio's MeshConfig, the istio
// ConfigMap's "mesh") as it changes.
type MeshSource interface {
	Current() *meshv1alpha1.MeshConfig
	Subscribe() (<-chan *meshv1alpha1.MeshConfig, func())
}

// meshState is one mesh configuration as generation reads it. A push
// state is built from a model snapshot and a meshState; proxies generate
// with the meshState of the push state they answer from.
type meshState struct {
	cfg   *meshv1alpha1.MeshConfig // nil: Istio's defaults
	keys  *keyfetch.JWKSSnapshot   // RequestAuthentication key sets; nil: none fetched
	envoy *envoygen.Generator
	grpc  *grpcgen.Generator // proxyless gRPC's, with the same route settings
}

func (s *Server) newMeshState(mc *meshv1alpha1.MeshConfig, keys *keyfetch.JWKSSnapshot) *meshState {
	m := envoyMesh(mc)
	m.AllowInsecureSkipVerify = s.cfg.AllowInsecureSkipVerify
	m.AllowLoopbackHTTPJWKS = s.cfg.AllowLoopbackHTTPJWKS
	m.SidecarIngressTLS = s.cfg.SidecarIngressTLS
	m.Networks = s.cfg.MeshNetworks
	g := &envoygen.Generator{TrustDomain: s.cfg.TrustDomain, Mesh: m, ScopeGatewayToNamespace: s.cfg.ScopeGatewayToNamespace}
	g.Telemetry = telemetry(mc)
	if keys != nil {
		g.Keys = keys
	}
	return &meshState{cfg: mc, keys: keys, envoy: g, grpc: &grpcgen.Generator{TrustDomain: s.cfg.TrustDomain, Routes: m.Routes}}
}

// applyMesh makes mc the mesh configuration the next push is built with.
func (s *Server) applyMesh(mc *meshv1alpha1.MeshConfig) {
	s.mesh.Store(s.newMeshState(mc, s.mesh.Load().keys))
}

// applyKeys makes keys the key sets the next push is built with.
func (s *Server) applyKeys(keys *keyfetch.JWKSSnapshot) {
	s.mesh.Store(s.newMeshState(s.mesh.Load().cfg, keys))
}

// jwksRule is what RequestAuthentication key sets may be fetched from.
func (s *Server) jwksRule() keyfetch.URLRule {
	return keyfetch.URLRule{LoopbackHTTP: s.cfg.AllowLoopbackHTTPJWKS}
}

// KeySets are the key sets istiod fetches for RequestAuthentication
// (keyfetch.JWKSCache): the server says which it wants as the model
// changes and pushes each snapshot of them like a mesh change.
type KeySets interface {
	Want(srcs []keyfetch.JWKSSource)
	Current() *keyfetch.JWKSSnapshot
	Subscribe() (<-chan *keyfetch.JWKSSnapshot, func())
}

var _ KeySets = (*keyfetch.JWKSCache)(nil)

// subscribeKeys subscribes to the key sets; without them, the channel is
// nil and never ready.
func (s *Server) subscribeKeys() (<-chan *keyfetch.JWKSSnapshot, func()) {
	if s.cfg.KeySets == nil {
		return nil, func() {}
	}
	return s.cfg.KeySets.Subscribe()
}

func currentKeys(k KeySets) *keyfetch.JWKSSnapshot {
	if k == nil {
		return nil
	}
	return k.Current()
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

// derive is snap as generation sees it under m: mesh-wide policies are
// those of m's root namespace (the model's own when m names none), and
// Services and DestinationRules without exportTo are exported as m's
// defaultServiceExportTo and defaultDestinationRuleExportTo say.
func (m *meshState) derive(snap *model.Snapshot) *model.Snapshot {
	return snap.WithRootNamespace(m.cfg.GetRootNamespace()).
		WithExportDefaults(m.cfg.GetDefaultServiceExportTo(), m.cfg.GetDefaultDestinationRuleExportTo())
}

// meshOf is the meshState st was built with; a push state made without
// one (tests) generates with the one in force.
func (s *Server) meshOf(st *pushState) *meshState {
	if st.mesh != nil {
		return st.mesh
	}
	return s.mesh.Load()
}

// newState is the push state of the model snapshot snap under the mesh
// configuration in force.
func (s *Server) newState(snap *model.Snapshot, changedAt time.Time) *pushState {
	ms := s.mesh.Load()
	st := newPushState(ms.derive(snap), changedAt)
	st.mesh = ms
	return st
}

// subscribeMesh subscribes to the mesh source; without one, the channel
// is nil and never ready.
func (s *Server) subscribeMesh() (<-chan *meshv1alpha1.MeshConfig, func()) {
	if s.cfg.Mesh == nil {
		return nil, func() {}
	}
	return s.cfg.Mesh.Subscribe()
}

func currentMesh(src MeshSource) *meshv1alpha1.MeshConfig {
	if src == nil {
		return nil
	}
	return src.Current()
}
