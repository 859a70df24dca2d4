package interop

import (
	"fmt"
	"slices"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// Names of the filters the telemetry comparison follows: the telemetry
// filters themselves, and those both generators emit, which fix where the
// telemetry filters stand among them.
var (
	telemetryNetworkFilters = []string{"istio.metadata_exchange", "istio.stats", "envoy.filters.network.rbac",
		"envoy.filters.network.http_connection_manager", "envoy.filters.network.tcp_proxy"}
	telemetryHTTPFilters = []string{"istio.metadata_exchange", "envoy.filters.http.rbac", "envoy.filters.http.jwt_authn",
		"istio.alpn", "istio.stats", "envoy.filters.http.router"}
	telemetryFilterNames = []string{"istio.metadata_exchange", "istio.stats"}
)

// TestTelemetryFiltersMatchIstio compares, for every pod of the mesh
// default scenario and for Istio's installed mesh config (metrics by the
// "prometheus" provider) alone and with mesh access logging as text, as
// JSON and with a format of its own, the telemetry Istio's generator
// gives the sidecar with what ours (envoygen, its Telemetry from the same
// MeshConfig) gives it: on every filter chain both have (same listener,
// same match), the network filters and the HTTP filters of the connection
// manager, restricted to the telemetry filters and those both emit,
// present in the same order, istio.metadata_exchange and istio.stats with
// equal configuration; the access logs of each connection manager,
// tcp_proxy and listener; and the filters of every cluster both have.
// A comparison that reaches too few inbound and outbound HTTP and TCP
// chains fails, so the test cannot pass by comparing nothing.
func TestTelemetryFiltersMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	sc := sidecarScenarios[0]
	snap := ourSnapshot(t, w.objects, sc.istio)
	for name, configure := range map[string]func(*meshconfig.MeshConfig){
		"installed defaults": func(*meshconfig.MeshConfig) {},
		"text access log": func(m *meshconfig.MeshConfig) {
			m.AccessLogFile = "/dev/stdout"
		},
		"JSON access log": func(m *meshconfig.MeshConfig) {
			m.AccessLogFile, m.AccessLogEncoding = "/dev/stdout", meshconfig.MeshConfig_JSON
		},
		"own text format": func(m *meshconfig.MeshConfig) {
			m.AccessLogFile, m.AccessLogFormat = "/var/log/access.log", "%START_TIME% %REQ_WITHOUT_QUERY(:PATH)% %RESPONSE_CODE%"
		},
		"own JSON format": func(m *meshconfig.MeshConfig) {
			m.AccessLogFile, m.AccessLogEncoding = "/dev/stdout", meshconfig.MeshConfig_JSON
			m.AccessLogFormat = `{"code":"%RESPONSE_CODE%","peer":"%DOWNSTREAM_PEER_URI_SAN%"}`
		},
		"metrics off": func(m *meshconfig.MeshConfig) {
			m.DefaultProviders.Metrics = nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := mesh.DefaultMeshConfig()
			// What Istio's installation writes into the mesh config.
			m.DefaultProviders = &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}
			configure(m)
			s := istioServerWithMesh(t, sc, m)
			tel, err := envoygen.NewTelemetry(envoygen.TelemetryFromMesh(m))
			if err != nil {
				t.Fatal(err)
			}
			g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Telemetry: tel}
			c := &telemetryComparison{t: t, counts: map[string]int{}}
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				proxy := istioProxy(s, pod)
				ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}})
				c.listeners(key, s.Listeners(proxy), ours.listeners)
				c.clusters(key, s.Clusters(proxy), ours.clusters)
			}
			t.Logf("compared: %v", c.counts)
			for _, kind := range []string{"inbound http", "inbound tcp", "outbound http", "outbound tcp", "cluster"} {
				if c.counts[kind] < 2 {
					t.Errorf("only %d %s chains or clusters compared", c.counts[kind], kind)
				}
			}
			if m.AccessLogFile != "" && c.counts["logged"] == 0 {
				t.Errorf("access logging on, yet no access log compared")
			}
			if len(m.DefaultProviders.Metrics) > 0 && c.counts["istio.stats"] == 0 {
				t.Errorf("metrics on, yet no istio.stats compared")
			}
		})
	}
}

// istioServerWithMesh is istioServer with the mesh config m.
func istioServerWithMesh(t *testing.T, sc sidecarScenario, m *meshconfig.MeshConfig) *xds.FakeDiscoveryServer {
	t.Helper()
	cfgs, _, err := crd.ParseInputs(sc.istio)
	if err != nil {
		t.Fatalf("crd.ParseInputs: %v", err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: sidecarWorld, MeshConfig: m})
	// Istio's generator keeps the mesh access log it built last in a
	// package variable until told the mesh config changed, as istiod
	// tells it.
	s.ConfigGen.MeshConfigChanged(m)
	t.Cleanup(func() { s.ConfigGen.MeshConfigChanged(m) })
	return s
}

type telemetryComparison struct {
	t      *testing.T
	counts map[string]int
	// class names the chains of every listener compared ("gateway");
	// empty, a sidecar's are inbound or outbound by their listener.
	class string
}

func (c *telemetryComparison) errorf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf(format, args...)
}

func (c *telemetryComparison) listeners(pod string, istio, ours []*listenerv3.Listener) {
	c.t.Helper()
	byName := map[string]*listenerv3.Listener{}
	for _, l := range ours {
		byName[l.GetName()] = l
	}
	for _, il := range istio {
		ol := byName[il.GetName()]
		if ol == nil {
			continue
		}
		where := pod + " " + il.GetName()
		c.accessLogs(where+" listener", il.GetAccessLog(), ol.GetAccessLog())
		dir := "outbound"
		switch {
		case c.class != "":
			dir = c.class
		case il.GetName() == "virtualInbound":
			dir = "inbound"
		}
		for _, ic := range il.GetFilterChains() {
			i := slices.IndexFunc(ol.GetFilterChains(), func(oc *listenerv3.FilterChain) bool {
				return proto.Equal(oc.GetFilterChainMatch(), ic.GetFilterChainMatch())
			})
			if i < 0 {
				continue
			}
			c.chain(fmt.Sprintf("%s chain %q %s", where, ic.GetName(), prototext.Format(ic.GetFilterChainMatch())), dir, ic, ol.GetFilterChains()[i])
		}
		if il.GetDefaultFilterChain() != nil && ol.GetDefaultFilterChain() != nil {
			c.chain(where+" default chain", dir, il.GetDefaultFilterChain(), ol.GetDefaultFilterChain())
		}
	}
}

func (c *telemetryComparison) chain(where, dir string, istio, ours *listenerv3.FilterChain) {
	c.t.Helper()
	in, on := filterNames(istio.GetFilters(), telemetryNetworkFilters), filterNames(ours.GetFilters(), telemetryNetworkFilters)
	if !slices.Equal(in, on) {
		c.errorf("%s: network filters\n  istio: %v\n  ours:  %v", where, in, on)
		return
	}
	ifs, ofs := keep(istio.GetFilters(), telemetryNetworkFilters), keep(ours.GetFilters(), telemetryNetworkFilters)
	kind := "tcp"
	for i := range ifs {
		name := ifs[i].GetName()
		switch name {
		case "envoy.filters.network.tcp_proxy":
			var it, ot tcpv3.TcpProxy
			mustUnmarshal(c.t, ifs[i].GetTypedConfig(), &it)
			mustUnmarshal(c.t, ofs[i].GetTypedConfig(), &ot)
			c.accessLogs(where+" tcp_proxy", it.GetAccessLog(), ot.GetAccessLog())
		case "envoy.filters.network.http_connection_manager":
			kind = "http"
			var ih, oh hcmv3.HttpConnectionManager
			mustUnmarshal(c.t, ifs[i].GetTypedConfig(), &ih)
			mustUnmarshal(c.t, ofs[i].GetTypedConfig(), &oh)
			c.hcm(where, &ih, &oh)
		default:
			c.sameConfig(where, name, ifs[i].GetTypedConfig(), ofs[i].GetTypedConfig())
		}
	}
	c.counts[dir+" "+kind]++
}

func (c *telemetryComparison) hcm(where string, istio, ours *hcmv3.HttpConnectionManager) {
	c.t.Helper()
	c.accessLogs(where+" http_connection_manager", istio.GetAccessLog(), ours.GetAccessLog())
	in, on := httpFilterNames(istio.GetHttpFilters()), httpFilterNames(ours.GetHttpFilters())
	if !slices.Equal(in, on) {
		c.errorf("%s: HTTP filters\n  istio: %v\n  ours:  %v", where, in, on)
		return
	}
	for _, name := range telemetryFilterNames {
		i := slices.IndexFunc(istio.GetHttpFilters(), func(f *hcmv3.HttpFilter) bool { return f.GetName() == name })
		o := slices.IndexFunc(ours.GetHttpFilters(), func(f *hcmv3.HttpFilter) bool { return f.GetName() == name })
		if i >= 0 {
			c.sameConfig(where+" HTTP", name, istio.GetHttpFilters()[i].GetTypedConfig(), ours.GetHttpFilters()[o].GetTypedConfig())
		}
	}
}

func (c *telemetryComparison) sameConfig(where, name string, istio, ours proto.Message) {
	c.t.Helper()
	if !protoEqual(istio, ours) {
		c.errorf("%s %s: configuration differs\n  istio: %s\n  ours:  %s", where, name, prototext.Format(istio), prototext.Format(ours))
		return
	}
	c.counts[name]++
}

func mustUnmarshal(t *testing.T, a *anypb.Any, m proto.Message) {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("unmarshal %s: %v", a.GetTypeUrl(), err)
	}
}

func (c *telemetryComparison) accessLogs(where string, istio, ours []*accesslogv3.AccessLog) {
	c.t.Helper()
	if len(istio) != len(ours) {
		c.errorf("%s: %d access logs, Istio's %d", where, len(ours), len(istio))
		return
	}
	for i := range istio {
		if !protoEqual(istio[i], ours[i]) {
			c.errorf("%s: access log %d differs\n  istio: %s\n  ours:  %s", where, i, prototext.Format(istio[i]), prototext.Format(ours[i]))
			return
		}
	}
	if len(istio) > 0 {
		c.counts["logged"]++
	}
}

func (c *telemetryComparison) clusters(pod string, istio, ours []*clusterv3.Cluster) {
	c.t.Helper()
	byName := map[string]*clusterv3.Cluster{}
	for _, cl := range ours {
		byName[cl.GetName()] = cl
	}
	for _, ic := range istio {
		oc := byName[ic.GetName()]
		if oc == nil {
			continue
		}
		if len(ic.GetFilters()) != len(oc.GetFilters()) {
			c.errorf("%s cluster %s: %d filters, Istio's %d", pod, ic.GetName(), len(oc.GetFilters()), len(ic.GetFilters()))
			continue
		}
		for i := range ic.GetFilters() {
			if !protoEqual(ic.GetFilters()[i], oc.GetFilters()[i]) {
				c.errorf("%s cluster %s: filter %d differs\n  istio: %s\n  ours:  %s", pod, ic.GetName(), i,
					prototext.Format(ic.GetFilters()[i]), prototext.Format(oc.GetFilters()[i]))
			}
		}
		if len(ic.GetFilters()) > 0 {
			c.counts["cluster"]++
		}
	}
}

func filterNames(fs []*listenerv3.Filter, followed []string) []string {
	var out []string
	for _, f := range keep(fs, followed) {
		out = append(out, f.GetName())
	}
	return out
}

func keep(fs []*listenerv3.Filter, followed []string) []*listenerv3.Filter {
	var out []*listenerv3.Filter
	for _, f := range fs {
		if slices.Contains(followed, f.GetName()) {
			out = append(out, f)
		}
	}
	return out
}

func httpFilterNames(fs []*hcmv3.HttpFilter) []string {
	var out []string
	for _, f := range fs {
		if slices.Contains(telemetryHTTPFilters, f.GetName()) {
			out = append(out, f.GetName())
		}
	}
	return out
}

// protoEqual compares messages field by field, those packed in an Any
// too: their bytes may differ where a map's entries are marshalled in
// another order.
func protoEqual(x, y proto.Message) bool {
	return cmp.Equal(x, y, protocmp.Transform())
}

// TestGatewayTelemetryFiltersMatchIstio is TestTelemetryFiltersMatchIstio
// for a router: the listener of a Gateway's plaintext HTTP server, under
// Istio's installed mesh config with a text access log, compared with
// what Istio's generator gives the gateway (its ListenerClassGateway:
// the client's side of the metadata exchange, istio.stats not reading the
// Host header, the listener's own access log).
func TestGatewayTelemetryFiltersMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	servers := []*networkingv1.Server{{
		Port:  &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"},
		Hosts: []string{"*"},
	}}
	m := mesh.DefaultMeshConfig()
	m.DefaultProviders = &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}
	m.AccessLogFile = "/dev/stdout"
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cg := core.NewConfigGenTest(t, core.TestOptions{MeshConfig: m, Configs: []config.Config{{
		Meta: config.Meta{GroupVersionKind: gvk.Gateway, Name: "gateway", Namespace: gwNs, CreationTimestamp: base},
		Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers},
	}}})
	cg.ConfigGen.MeshConfigChanged(m)
	t.Cleanup(func() { cg.ConfigGen.MeshConfigChanged(m) })
	proxy := cg.SetupProxy(&model.Proxy{
		Type: model.Router, ConfigNamespace: gwNs, Labels: gwLabels, ID: "gw.istio-system",
		Metadata: &model.NodeMetadata{Namespace: gwNs, Labels: gwLabels},
	})
	snap, _ := ourGatewayWorld(gwRouteCase{}, servers)
	tel, err := envoygen.NewTelemetry(envoygen.TelemetryFromMesh(m))
	if err != nil {
		t.Fatal(err)
	}
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Telemetry: tel}
	ours := ourResources(t, g, snap, &envoygen.Proxy{Router: true, Namespace: gwNs, Labels: gwLabels})
	c := &telemetryComparison{t: t, counts: map[string]int{}, class: "gateway"}
	c.listeners("gateway", cg.Listeners(proxy), ours.listeners)
	t.Logf("compared: %v", c.counts)
	if c.counts["gateway http"] != 1 || c.counts["istio.stats"] != 1 || c.counts["istio.metadata_exchange"] != 1 || c.counts["logged"] != 2 {
		t.Errorf("compared %v, want one HTTP chain with its two telemetry filters, its log and the listener's", c.counts)
	}
}
