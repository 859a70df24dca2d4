package xds

import (
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/generation"
)

// MeshSource is the mesh configuration (Istio's MeshConfig, the istio
// ConfigMap's "mesh") as it changes.
type MeshSource interface {
	Current() *meshv1alpha1.MeshConfig
	Subscribe() (<-chan *meshv1alpha1.MeshConfig, func())
}

// newMeshState is the generation of mesh configuration mc, key sets
// keys and meshNetworks nets under the server's settings.
func (s *Server) newMeshState(mc *meshv1alpha1.MeshConfig, keys *keyfetch.JWKSSnapshot, nets *model.MeshNetworks) *generation.Mesh {
	return generation.NewMesh(generation.Settings{
		TrustDomain:             s.cfg.TrustDomain,
		AllowInsecureSkipVerify: s.cfg.AllowInsecureSkipVerify,
		AllowLoopbackHTTPJWKS:   s.cfg.AllowLoopbackHTTPJWKS,
		SidecarIngressTLS:       s.cfg.SidecarIngressTLS,
		ScopeGatewayToNamespace: s.cfg.ScopeGatewayToNamespace,
		MeshNetworks:            nets,
	}, mc, keys)
}

// applyMesh makes mc the mesh configuration the next push is built with.
func (s *Server) applyMesh(mc *meshv1alpha1.MeshConfig) {
	cur := s.mesh.Load()
	s.mesh.Store(s.newMeshState(mc, cur.Keys, cur.Settings().MeshNetworks))
}

// applyKeys makes keys the key sets the next push is built with.
func (s *Server) applyKeys(keys *keyfetch.JWKSSnapshot) {
	cur := s.mesh.Load()
	s.mesh.Store(s.newMeshState(cur.Config, keys, cur.Settings().MeshNetworks))
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

// meshOf is the generation st was built with; a push state made without
// one (tests) generates with the one in force.
func (s *Server) meshOf(st *pushState) *generation.Mesh {
	if st.mesh != nil {
		return st.mesh
	}
	return s.mesh.Load()
}

// newState is the push state of the model snapshot snap under the mesh
// configuration in force.
func (s *Server) newState(snap *model.Snapshot, changedAt time.Time) *pushState {
	ms := s.mesh.Load()
	st := newPushState(ms.Derive(snap), changedAt)
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
