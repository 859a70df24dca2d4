package interop

import (
	"errors"
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"istio.io/istio/pilot/test/xdstest"
)

// TestSidecarConfigValid judges our generator's configuration of every
// sidecar of every scenario with Istio's structural validators
// (pilot/test/xdstest) and Envoy's proto validation (ValidateAll, on every
// resource and on every typed config inside it), and checks that Envoy
// would not wait forever or answer 503 silently: every RDS name a listener
// names exists, every EDS cluster has a ClusterLoadAssignment, and every
// cluster a route or tcp_proxy names exists.
func TestSidecarConfigValid(t *testing.T) {
	w := newMeshObjects(t)
	for _, sc := range sidecarScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ours := ourSide(t, w, sc)
			for _, key := range sc.pods {
				t.Run(w.pod(t, key).Name, func(t *testing.T) { checkConfigValid(t, ours[key]) })
			}
		})
	}
}

func checkConfigValid(t *testing.T, cfg *sidecarResources) {
	t.Helper()
	if len(cfg.listeners) == 0 || len(cfg.clusters) == 0 {
		t.Errorf("%d listeners and %d clusters: a sidecar needs both", len(cfg.listeners), len(cfg.clusters))
	}
	xdstest.ValidateListeners(t, cfg.listeners)
	xdstest.ValidateClusters(t, cfg.clusters)
	validateRouteConfigurations(t, cfg.routes)
	xdstest.ValidateClusterLoadAssignments(t, cfg.endpoints)
	var all []proto.Message
	for _, m := range cfg.listeners {
		all = append(all, m)
	}
	for _, m := range cfg.clusters {
		all = append(all, m)
	}
	for _, m := range cfg.routes {
		all = append(all, m)
	}
	for _, m := range cfg.endpoints {
		all = append(all, m)
	}
	for _, m := range all {
		if err := validateDeep(m); err != nil {
			t.Errorf("%s %s: %v", m.ProtoReflect().Descriptor().Name(), resourceName(m), err)
		}
	}
	checkReferences(t, cfg)
}

// validateRouteConfigurations runs xdstest.ValidateRouteConfigurations on
// the route configurations it can judge: it reads
// max_direct_response_body_size_bytes without checking it is set, and would
// panic on one that leaves it unset, so those are reported here instead.
func validateRouteConfigurations(t *testing.T, rcs []*routev3.RouteConfiguration) {
	t.Helper()
	var judged []*routev3.RouteConfiguration
	for _, rc := range rcs {
		if rc.GetMaxDirectResponseBodySizeBytes() == nil {
			t.Errorf("route configuration %s: max_direct_response_body_size_bytes unset (Istio sets 1 MiB; Envoy's default is 4 KiB)", rc.GetName())
			continue
		}
		judged = append(judged, rc)
	}
	xdstest.ValidateRouteConfigurations(t, judged)
}

func resourceName(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return "?"
}

// validateDeep runs ValidateAll on m and on the content of every Any in
// it, which m's own validation does not look into. An Any whose type the
// test binary does not know is reported: Envoy NACKs types it does not
// know, and the types of every extension Istio configures are linked in.
func validateDeep(m proto.Message) error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, err)
		}
	}
	walkAnys(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err))
			return
		}
		if err := validateDeep(inner); err != nil {
			errs = append(errs, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err))
		}
	})
	return errors.Join(errs...)
}

// walkAnys calls fn with every Any directly reachable in m (not inside
// another Any).
func walkAnys(m protoreflect.Message, fn func(*anypb.Any)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		fn(a)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				walkAnys(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkAnys(mv.Message(), fn)
					return true
				})
			}
		default:
			walkAnys(v.Message(), fn)
		}
		return true
	})
}

// checkReferences checks the names resources give each other.
func checkReferences(t *testing.T, cfg *sidecarResources) {
	t.Helper()
	clusters := xdstest.ExtractClusters(cfg.clusters)
	routes := xdstest.ExtractRouteConfigurations(cfg.routes)
	loads := map[string]bool{}
	for _, cla := range cfg.endpoints {
		loads[cla.GetClusterName()] = true
	}
	for _, c := range cfg.clusters {
		if c.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		if !loads[name] {
			t.Errorf("EDS cluster %s: no ClusterLoadAssignment %q in EDS (Envoy would keep it warming)", c.GetName(), name)
		}
	}
	for _, l := range cfg.listeners {
		for _, fc := range listenerChains(l) {
			for _, f := range fc.GetFilters() {
				switch f.GetTypedConfig().GetTypeUrl() {
				case hcmType:
					h := &hcmv3.HttpConnectionManager{}
					if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
						continue // validateDeep reports it
					}
					if rds := h.GetRds(); rds != nil {
						rc, ok := routes[rds.GetRouteConfigName()]
						if !ok {
							t.Errorf("listener %s chain %q: RDS %q is not in RDS (Envoy would keep it warming)", l.GetName(), fc.GetName(), rds.GetRouteConfigName())
							continue
						}
						checkRouteClusters(t, fmt.Sprintf("RDS %s", rc.GetName()), rc, clusters)
					} else if rc := h.GetRouteConfig(); rc != nil {
						checkRouteClusters(t, fmt.Sprintf("listener %s chain %q inline routes", l.GetName(), fc.GetName()), rc, clusters)
					} else {
						t.Errorf("listener %s chain %q: HTTP connection manager without routes", l.GetName(), fc.GetName())
					}
				case tcpProxyType:
					tp := &tcpproxyv3.TcpProxy{}
					if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
						continue
					}
					names := []string{tp.GetCluster()}
					for _, wc := range tp.GetWeightedClusters().GetClusters() {
						names = append(names, wc.GetName())
					}
					for _, n := range names {
						if n != "" && clusters[n] == nil {
							t.Errorf("listener %s chain %q: tcp_proxy to unknown cluster %q", l.GetName(), fc.GetName(), n)
						}
					}
				}
			}
		}
	}
}

// listenerChains are a listener's filter chains and its default chain.
func listenerChains(l *listenerv3.Listener) []*listenerv3.FilterChain {
	out := append([]*listenerv3.FilterChain(nil), l.GetFilterChains()...)
	if l.GetDefaultFilterChain() != nil {
		out = append(out, l.GetDefaultFilterChain())
	}
	return out
}

// checkRouteClusters checks that every cluster a route sends to exists:
// RDS does not make Envoy check it, and an unknown cluster is a silent 503.
func checkRouteClusters(t *testing.T, where string, rc *routev3.RouteConfiguration, clusters map[string]*clusterv3.Cluster) {
	t.Helper()
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if a == nil {
				continue
			}
			names := []string{a.GetCluster()}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				names = append(names, wc.GetName())
			}
			for _, n := range names {
				if n != "" && clusters[n] == nil {
					t.Errorf("%s: virtual host %q route %q sends to unknown cluster %q", where, vh.GetName(), r.GetName(), n)
				}
			}
		}
	}
}
