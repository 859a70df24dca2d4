package xds

import (
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// reportMeshRoutes logs, once while it lasts, each part of a
// VirtualService bound to sidecars that they do not get, and counts them
// (bulwark_policy_fail_closed, kind VirtualService): the services it
// names keep their default routes.
func (s *Server) reportMeshRoutes(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	if len(snap.Resources().VirtualServices) == 0 {
		return
	}
	for _, p := range s.mesh.Load().envoy.Mesh.Routes.MeshProblems(snap) {
		closed.add("VirtualService", "sidecar_routes_left_out")
		msg := p.String()
		if current[msg] {
			continue
		}
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("virtual service not applied to sidecars as written", "virtualservice", p.Namespace+"/"+p.Name, "problem", p.Reason)
		}
	}
}
