package report

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// reportMeshRoutes logs, once while it lasts, each part of a
// VirtualService bound to sidecars that they do not get, and counts them
// (bulwark_policy_fail_closed, kind VirtualService): the services it
// names keep their default routes. While proxyless gRPC clients are
// connected, it also logs what of each such VirtualService gRPC does not
// honour (grpcgen.UnsupportedInVirtualService).
func (s *scan) reportMeshRoutes(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	if len(snap.Resources().VirtualServices) == 0 {
		return
	}
	envoy := s.mesh.Envoy
	for _, p := range append(envoy.Mesh.Routes.MeshProblems(snap), envoy.MeshL4Problems(snap)...) {
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
	if !s.connected.Proxyless {
		return
	}
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec == nil || !bindsMesh(vs) {
			continue
		}
		for _, field := range grpcgen.UnsupportedInVirtualService(vs) {
			msg := "grpc|" + vs.Namespace + "/" + vs.Name + "|" + field
			if current[msg] {
				continue
			}
			current[msg] = true
			if !s.reported[msg] {
				s.log.Warn("virtual service not honoured by proxyless gRPC as written", "virtualservice", vs.Namespace+"/"+vs.Name, "ignored", field)
			}
		}
	}
}

// bindsMesh reports whether vs is bound to sidecars.
func bindsMesh(vs *model.VirtualService) bool {
	gws := vs.Spec.GetGateways()
	return len(gws) == 0 || slices.Contains(gws, routes.Mesh)
}
