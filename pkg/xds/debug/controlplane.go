package debug

import (
	"encoding/json"
	"runtime"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Istio's debug types over ADS, which istioctl asks for (proxy-status,
// version; x internal-debug asks for TypeDebug, pages.go): a client
// whose node metadata says GENERATOR=event is served these and nothing
// else, on an authenticated TLS stream only.
const (
	Generator = "event"
	// TypeDebugSyncz is every connected proxy's sync status, one
	// envoy.service.status.v3.ClientConfig per proxy.
	TypeDebugSyncz = "istio.io/debug/syncz"
	// TypeDebugConfigDump is the configuration istiod generates for one
	// proxy, named "<pod>.<namespace>", as Envoy's admin config dump
	// sections (clusters, listeners, routes; never secrets).
	TypeDebugConfigDump = "istio.io/debug/config_dump"
)

// ControlPlane is how istiod names itself to istioctl in the debug types'
// responses: core.ControlPlane's identifier, as Istio writes it.
type ControlPlane struct {
	ID      string // this replica: its pod name
	Version string
}

// buildInfo is Istio's BuildInfo as JSON.
type buildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

func (c ControlPlane) buildInfo() buildInfo {
	return buildInfo{Version: c.Version, GitRevision: c.Version, GolangVersion: runtime.Version(), BuildStatus: "Clean", GitTag: c.Version}
}

// Identifier is Istio's IstioControlPlaneInstance as JSON.
func (c ControlPlane) Identifier() string {
	b, _ := json.Marshal(struct {
		Component string
		ID        string
		Info      buildInfo
	}{"istiod", c.ID, c.buildInfo()})
	return string(b)
}

// VersionJSON is what Istio's istiod serves on GET /version of its
// monitoring port, which `istioctl version` reads: {"clientVersion":
// BuildInfo}.
func (c ControlPlane) VersionJSON() []byte {
	b, _ := json.Marshal(struct {
		ClientVersion buildInfo `json:"clientVersion"`
	}{c.buildInfo()})
	return b
}

// Caller is an authenticated client of the debug types.
type Caller struct {
	Identity spiffeid.ID
	// Namespace limits what the caller is shown to that namespace's
	// proxies; "" shows every proxy.
	Namespace string
}
