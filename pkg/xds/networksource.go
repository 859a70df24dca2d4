package xds

import (
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// NetworksSource is meshNetworks (istiod's --networksConfig) as it
// changes.
type NetworksSource interface {
	Current() *model.MeshNetworks
	Subscribe() (<-chan *model.MeshNetworks, func())
}

// currentNetworks is the meshNetworks in force: the source's, else the
// fixed ones of the configuration.
func (s *Server) currentNetworks() *model.MeshNetworks {
	if s.cfg.Networks != nil {
		return s.cfg.Networks.Current()
	}
	return s.cfg.MeshNetworks
}

// subscribeNetworks subscribes to the networks source; without one, the
// channel is nil and never ready.
func (s *Server) subscribeNetworks() (<-chan *model.MeshNetworks, func()) {
	if s.cfg.Networks == nil {
		return nil, func() {}
	}
	return s.cfg.Networks.Subscribe()
}

// applyNetworks makes nets the meshNetworks the next push is built with.
// The push that carries them is not a full one (classify): only the load
// assignments the network gateways change are sent again.
func (s *Server) applyNetworks(nets *model.MeshNetworks) {
	cur := s.mesh.Load()
	s.mesh.Store(s.newMeshState(cur.Config, cur.Keys, nets))
}

// networksOf is the meshNetworks of a generation.
func networksOf(st *pushState) *model.MeshNetworks {
	if st.mesh == nil {
		return nil
	}
	return st.mesh.Settings().MeshNetworks
}
