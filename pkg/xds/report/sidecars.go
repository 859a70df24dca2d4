package report

import (
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// reportSidecars logs and counts, once each, the Sidecars that hide
// istiod's Service (istiod or istiod-<revision> of the system namespace)
// from the proxies they configure. Those proxies keep their xDS and
// certificates: pilot-agent reaches istiod through the cluster of its
// bootstrap, which no Sidecar scopes, as in Istio; only their
// applications lose istiod's Service through the mesh. A root namespace
// Sidecar is judged for the proxies of other namespaces.
func (s *scan) reportSidecars(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	if len(snap.Sidecars()) == 0 {
		return
	}
	s.reportProxylessSidecars(snap, closed, current)
	for _, sc := range snap.Sidecars() {
		if !sc.OverLimit() {
			continue
		}
		closed.add("Sidecar", "hosts_over_limit")
		msg := "sidecar|" + sc.Namespace + "/" + sc.Name + "|over limit"
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("sidecar resource has more egress hosts than are read; the proxies it configures import only the first ones",
				"sidecar", sc.Namespace+"/"+sc.Name, "limit", model.MaxSidecarHosts)
		}
	}
	system := s.cfg.SystemNamespace
	if system == "" {
		system = snap.Options.RootNamespace
	}
	var istiod []*model.Service
	for _, svc := range snap.Services() {
		if svc.Entry == nil && svc.Namespace == system && (svc.Name == "istiod" || strings.HasPrefix(svc.Name, "istiod-")) {
			istiod = append(istiod, svc)
		}
	}
	if len(istiod) == 0 {
		return
	}
	for _, sc := range snap.Sidecars() {
		ns := sc.Namespace
		if ns == snap.Options.RootNamespace && sc.Spec.GetWorkloadSelector() == nil {
			ns = "" // "." is each proxy's namespace, not the root's
		}
		if ns == system {
			continue // "./*" and its own services are the Sidecar's to name
		}
		hides := true
		for _, svc := range istiod {
			if sc.Imports(svc, ns) {
				hides = false
				break
			}
		}
		if !hides {
			continue
		}
		closed.add("Sidecar", "hides_istiod")
		msg := "sidecar|" + sc.Namespace + "/" + sc.Name + "|hides istiod"
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("sidecar resource hides istiod from the proxies it configures; they keep xDS and certificates through their bootstrap, their applications cannot reach istiod through the mesh",
				"sidecar", sc.Namespace+"/"+sc.Name, "istiod", istiod[0].Hostname)
		}
	}
}

// reportProxylessSidecars logs and counts, once each while a proxyless
// gRPC client is connected, what of each Sidecar proxyless clients do
// not honour (grpcgen.UnsupportedInSidecar); their egress is scoped as
// Envoy sidecars' is.
func (s *scan) reportProxylessSidecars(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	if !s.connected.Proxyless {
		return
	}
	for _, sc := range snap.Sidecars() {
		for _, field := range grpcgen.UnsupportedInSidecar(sc) {
			closed.add("Sidecar", "proxyless_ignored")
			msg := "grpc|sidecar|" + sc.Namespace + "/" + sc.Name + "|" + field
			current[msg] = true
			if !s.reported[msg] {
				s.log.Warn("sidecar resource not honoured by proxyless gRPC as written",
					"sidecar", sc.Namespace+"/"+sc.Name, "ignored", field)
			}
		}
	}
}
