package routes

import (
	"fmt"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Problem is a part of a VirtualService (or Gateway) left out, and why:
// logged and counted by the caller.
type Problem struct{ Kind, Namespace, Name, Reason string }

func (p Problem) String() string {
	return p.Kind + " " + p.Namespace + "/" + p.Name + ": " + p.Reason
}

// Limits bound what one VirtualService may make us build. They are
// generous: Istio's own tests and the largest configurations seen in use
// stay far below them.
const (
	MaxHosts        = 1000 // hosts of one VirtualService
	MaxHTTPRules    = 1000 // http rules of one VirtualService
	MaxMatches      = 100  // matches of one http rule
	MaxMatchFields  = 100  // headers, withoutHeaders or queryParams of one match
	MaxDestinations = 100  // destinations (route) of one rule
	MaxMirrors      = 16   // mirrors of one rule
	MaxL4Rules      = 1000 // tls or tcp rules of one VirtualService
	MaxSNIHosts     = 1000 // sniHosts of one tls match
	// MaxRoutes bounds the routes one virtual host collects from all the
	// VirtualServices for its host; a VirtualService that would pass it is
	// left out.
	MaxRoutes = 10000
	// MaxHeaderOps bounds the header operations of one rule or destination.
	MaxHeaderOps = 100
)

func vsProblem(vs *model.VirtualService, format string, args ...any) Problem {
	return Problem{Kind: "VirtualService", Namespace: vs.Namespace, Name: vs.Name, Reason: fmt.Sprintf(format, args...)}
}

// checkBounds reports the first limit vs passes, or "".
func checkBounds(spec *networkingv1.VirtualService) string {
	switch {
	case len(spec.GetHosts()) > MaxHosts:
		return fmt.Sprintf("%d hosts, more than %d", len(spec.GetHosts()), MaxHosts)
	case len(spec.GetHttp()) > MaxHTTPRules:
		return fmt.Sprintf("%d http rules, more than %d", len(spec.GetHttp()), MaxHTTPRules)
	case len(spec.GetTls()) > MaxL4Rules:
		return fmt.Sprintf("%d tls rules, more than %d", len(spec.GetTls()), MaxL4Rules)
	case len(spec.GetTcp()) > MaxL4Rules:
		return fmt.Sprintf("%d tcp rules, more than %d", len(spec.GetTcp()), MaxL4Rules)
	case len(spec.GetGateways()) > MaxHosts:
		return fmt.Sprintf("%d gateways, more than %d", len(spec.GetGateways()), MaxHosts)
	}
	for i, h := range spec.GetHttp() {
		switch {
		case len(h.GetMatch()) > MaxMatches:
			return fmt.Sprintf("http[%d]: %d matches, more than %d", i, len(h.GetMatch()), MaxMatches)
		case len(h.GetRoute()) > MaxDestinations:
			return fmt.Sprintf("http[%d]: %d destinations, more than %d", i, len(h.GetRoute()), MaxDestinations)
		case len(h.GetMirrors()) > MaxMirrors:
			return fmt.Sprintf("http[%d]: %d mirrors, more than %d", i, len(h.GetMirrors()), MaxMirrors)
		}
		for j, m := range h.GetMatch() {
			if n := max(len(m.GetHeaders()), len(m.GetWithoutHeaders()), len(m.GetQueryParams()), len(m.GetGateways())); n > MaxMatchFields {
				return fmt.Sprintf("http[%d].match[%d]: %d headers, query parameters or gateways, more than %d", i, j, n, MaxMatchFields)
			}
		}
	}
	for i, t := range spec.GetTls() {
		if len(t.GetMatch()) > MaxMatches || len(t.GetRoute()) > MaxDestinations {
			return fmt.Sprintf("tls[%d]: more than %d matches or %d destinations", i, MaxMatches, MaxDestinations)
		}
		for j, m := range t.GetMatch() {
			if len(m.GetSniHosts()) > MaxSNIHosts || len(m.GetGateways()) > MaxMatchFields {
				return fmt.Sprintf("tls[%d].match[%d]: more than %d sniHosts or %d gateways", i, j, MaxSNIHosts, MaxMatchFields)
			}
		}
	}
	for i, t := range spec.GetTcp() {
		if len(t.GetMatch()) > MaxMatches || len(t.GetRoute()) > MaxDestinations {
			return fmt.Sprintf("tcp[%d]: more than %d matches or %d destinations", i, MaxMatches, MaxDestinations)
		}
	}
	return ""
}
