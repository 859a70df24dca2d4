package bootstrap

import "net/http"

// debugPages are istiod's /debug pages other than the xDS server's own
// (syncz), by name: the monitoring port serves each to loopback callers
// under /debug/<name>, and the xDS server to istioctl (`x internal-debug
// <name>`) callers authenticated in istiod's namespace.
func (s *Server) debugPages() map[string]http.Handler {
	pages := map[string]http.Handler{}
	if s.unsupported != nil {
		pages["unsupported"] = s.unsupported.Handler()
	}
	if s.kube != nil && s.kube.clusters != nil {
		pages["clusterz"] = s.kube.clusters.Handler()
	}
	return pages
}
