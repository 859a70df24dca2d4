package interop

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
)

// securityFaults are faults the security checks must find: each breaks a
// copy of a configuration they pass (Istio's), and the check named must
// then report a problem. This keeps the checks from passing vacuously.
var securityFaults = []struct {
	name  string
	check string // a key of securityProblems
	// inject breaks cfg and reports whether it had anything to break.
	inject func(cfg *sidecarResources) bool
}{{
	name:  "inbound TLS without a client certificate",
	check: "inbound mTLS",
	inject: func(cfg *sidecarResources) bool {
		done := false
		for _, l := range cfg.listeners {
			for _, fc := range listenerChains(l) {
				if ts := fc.GetTransportSocket(); ts != nil {
					ctx := &tlsv3.DownstreamTlsContext{}
					if ts.GetTypedConfig().UnmarshalTo(ctx) == nil && ctx.GetRequireClientCertificate().GetValue() {
						ctx.RequireClientCertificate = wrapperspb.Bool(false)
						done = repack(ts, ctx) || done
					}
				}
			}
		}
		return done
	},
}, {
	name:  "RBAC filters left out",
	check: "RBAC",
	inject: func(cfg *sidecarResources) bool {
		done := false
		for _, l := range cfg.listeners {
			for _, fc := range listenerChains(l) {
				n := len(fc.Filters)
				fc.Filters = slices.DeleteFunc(fc.Filters, func(f *listenerv3.Filter) bool { return f.GetTypedConfig().GetTypeUrl() == netRBACType })
				done = done || len(fc.Filters) < n
				for _, f := range fc.Filters {
					h := &hcmv3.HttpConnectionManager{}
					if f.GetTypedConfig().GetTypeUrl() != hcmType || f.GetTypedConfig().UnmarshalTo(h) != nil {
						continue
					}
					n := len(h.HttpFilters)
					h.HttpFilters = slices.DeleteFunc(h.HttpFilters, func(hf *hcmv3.HttpFilter) bool { return hf.GetTypedConfig().GetTypeUrl() == httpRBACType })
					if len(h.HttpFilters) < n {
						done = repackFilter(f, h) || done
					}
				}
			}
		}
		return done
	},
}, {
	name:  "upstream SANs matched by prefix",
	check: "outbound mTLS",
	inject: func(cfg *sidecarResources) bool {
		done := false
		for _, c := range cfg.clusters {
			sockets := []*corev3.TransportSocket{c.GetTransportSocket()}
			for _, m := range c.GetTransportSocketMatches() {
				sockets = append(sockets, m.GetTransportSocket())
			}
			for _, ts := range sockets {
				ctx := &tlsv3.UpstreamTlsContext{}
				if ts.GetTypedConfig().GetTypeUrl() != upstreamTLSType || ts.GetTypedConfig().UnmarshalTo(ctx) != nil {
					continue
				}
				vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
				matchers := vc.GetMatchSubjectAltNames() //nolint:staticcheck // what Istio sets
				for _, m := range vc.GetMatchTypedSubjectAltNames() {
					matchers = append(matchers, m.GetMatcher())
				}
				changed := false
				for _, m := range matchers {
					if e := m.GetExact(); e != "" {
						m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: e}
						changed = true
					}
				}
				if changed {
					done = repack(ts, ctx) || done
				}
			}
		}
		return done
	},
}, {
	name:  "auto-mTLS marks left off the endpoints",
	check: "outbound mTLS",
	inject: func(cfg *sidecarResources) bool {
		auto := map[string]bool{}
		for _, c := range cfg.clusters {
			auto[c.GetName()] = len(c.GetTransportSocketMatches()) > 0
		}
		done := false
		for _, cla := range cfg.endpoints {
			if !auto[cla.GetClusterName()] {
				continue
			}
			for _, loc := range cla.GetEndpoints() {
				for _, e := range loc.GetLbEndpoints() {
					if fm := e.GetMetadata().GetFilterMetadata(); fm["envoy.transport_socket_match"] != nil {
						delete(fm, "envoy.transport_socket_match")
						done = true
					}
				}
			}
		}
		return done
	},
}}

// repack replaces a transport socket's typed config with m.
func repack(ts *corev3.TransportSocket, m proto.Message) bool {
	a, err := anypb.New(m)
	if err != nil {
		return false
	}
	ts.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: a}
	return true
}

// repackFilter replaces a network filter's typed config with m.
func repackFilter(f *listenerv3.Filter, m proto.Message) bool {
	a, err := anypb.New(m)
	if err != nil {
		return false
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	return true
}

// cloneResources deep-copies cfg.
func cloneResources(cfg *sidecarResources) *sidecarResources {
	out := &sidecarResources{}
	for _, m := range cfg.listeners {
		out.listeners = append(out.listeners, proto.Clone(m).(*listenerv3.Listener))
	}
	for _, m := range cfg.clusters {
		out.clusters = append(out.clusters, proto.Clone(m).(*clusterv3.Cluster))
	}
	for _, m := range cfg.routes {
		out.routes = append(out.routes, proto.Clone(m).(*routev3.RouteConfiguration))
	}
	for _, m := range cfg.endpoints {
		out.endpoints = append(out.endpoints, proto.Clone(m).(*endpointv3.ClusterLoadAssignment))
	}
	return out
}

// checkFaultsFound injects each of securityFaults into a copy of cfg, a
// configuration the security checks pass, and fails the test when the
// check meant to find it does not.
func checkFaultsFound(t *testing.T, w *meshObjects, pol *policies, pod *corev1.Pod, cfg *sidecarResources) {
	t.Helper()
	for _, f := range securityFaults {
		broken := cloneResources(cfg)
		if !f.inject(broken) {
			continue
		}
		if len(securityProblems(w, pol, pod, broken)[f.check]) == 0 {
			t.Errorf("the %s check does not find a fault: %s", f.check, f.name)
		}
	}
}
