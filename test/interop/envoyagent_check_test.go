package interop

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pilot/pkg/simulation"
	corev1 "k8s.io/api/core/v1"

	// The extension types a sidecar's config carries, for its Anys.
	_ "istio.io/istio/pkg/config/xds"
)

// xdsTypes are the types the stand-in must hold, in Envoy's order.
var xdsTypes = []string{"CDS", "EDS", "LDS", "RDS"}

// configComplete reports what the stand-in still lacks of a complete,
// accepted config: "" once the server is LIVE, every type ACKed, the
// secrets default and ROOTCA held, and nothing warming.
func configComplete(st *standinState) string {
	var missing []string
	for _, typ := range xdsTypes {
		ts := st.XDS[typ]
		switch {
		case ts == nil:
			missing = append(missing, typ+" never asked for")
		case ts.NACKs > 0:
			missing = append(missing, fmt.Sprintf("%s NACKed %d times, last: %s", typ, ts.NACKs, ts.LastNACK))
		case ts.ACKs == 0:
			missing = append(missing, typ+" not ACKed yet")
		}
	}
	for _, name := range []string{"default", "ROOTCA"} {
		s := st.Secrets[name]
		switch {
		case s == nil:
			missing = append(missing, "secret "+name+" never asked for")
		case s.NACKs > 0:
			missing = append(missing, fmt.Sprintf("secret %s NACKed: %s", name, s.LastNACK))
		case s.ACKs == 0:
			missing = append(missing, "secret "+name+" not received")
		}
	}
	for what, waits := range st.Warming {
		missing = append(missing, fmt.Sprintf("%s warming, waits for %v", what, waits))
	}
	if st.Server.State != "LIVE" || !st.Server.WorkersStarted {
		missing = append(missing, "server "+st.Server.State)
	}
	slices.Sort(missing)
	return strings.Join(missing, "; ")
}

// checkStandinSecrets checks the secrets the agent served: default holds
// a chain istiod issued for w's identity, with its key, and ROOTCA is
// istiod's published root.
func checkStandinSecrets(t *testing.T, st *standinState, w workload, rootFile string) {
	t.Helper()
	published, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	publishedCerts := parseCerts(t, published)
	for _, c := range publishedCerts {
		roots.AddCert(c)
	}
	def, root := st.Secrets["default"], st.Secrets["ROOTCA"]
	if def == nil || root == nil {
		t.Fatalf("secrets held: %v, want default and ROOTCA", slices.Sorted(maps.Keys(st.Secrets)))
	}
	if def.Kind != "tls_certificate" || !def.KeyMatches {
		t.Errorf("default: kind %q, key matches %v; want a TLS certificate with its key", def.Kind, def.KeyMatches)
	}
	if def.VerifiedBy != "ROOTCA" {
		t.Errorf("default does not verify to ROOTCA in the stand-in: verified by %q, %s", def.VerifiedBy, def.VerifyError)
	}
	chain := parseCerts(t, []byte(def.CertificateChain))
	if len(chain) == 0 {
		t.Fatal("default holds no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("default's leaf does not chain to istiod's published root: %v", err)
	}
	if want := w.SPIFFEID(); len(chain[0].URIs) != 1 || chain[0].URIs[0].String() != want {
		t.Errorf("default's leaf URI SANs = %v, want exactly [%s]", chain[0].URIs, want)
	}
	if root.Kind != "validation_context" {
		t.Errorf("ROOTCA: kind %q, want a validation context", root.Kind)
	}
	got := parseCerts(t, []byte(root.TrustedCA))
	if len(got) != len(publishedCerts) {
		t.Errorf("ROOTCA holds %d certificates, istio-ca-root-cert %d", len(got), len(publishedCerts))
	}
	for _, c := range got {
		if !slices.ContainsFunc(publishedCerts, func(p *x509.Certificate) bool { return bytes.Equal(p.Raw, c.Raw) }) {
			t.Errorf("ROOTCA holds %s, which istio-ca-root-cert does not", c.Subject)
		}
	}
	t.Logf("default: %s, issued by %s, valid until %s", chain[0].URIs[0], chain[0].Issuer, chain[0].NotAfter.Format(time.RFC3339))
}

// checkStandinXDS checks the ADS exchange: the node pilot-agent gave the
// stand-in, every type ACKed and none NACKed, Envoy's warming order, the
// readiness stats, the admin endpoints asked for, and no warnings.
func checkStandinXDS(t *testing.T, st *standinState) {
	t.Helper()
	if st.Bootstrap.ADSType != "DELTA_GRPC" {
		t.Errorf("bootstrap ADS type %q, want DELTA_GRPC", st.Bootstrap.ADSType)
	}
	if _, ok := st.Node.Metadata["GENERATOR"]; ok {
		t.Errorf("node metadata has GENERATOR=%v: not a sidecar", st.Node.Metadata["GENERATOR"])
	}
	if !strings.HasPrefix(st.Node.ID, "sidecar~") {
		t.Errorf("node ID %q is not a sidecar's", st.Node.ID)
	}
	for _, typ := range xdsTypes {
		ts := st.XDS[typ]
		if ts == nil {
			t.Errorf("%s never asked for", typ)
			continue
		}
		if ts.NACKs != 0 || ts.ACKs != ts.Responses || ts.ACKs == 0 {
			t.Errorf("%s: %d responses, %d ACKs, %d NACKs (last: %s)", typ, ts.Responses, ts.ACKs, ts.NACKs, ts.LastNACK)
		}
		if len(st.Resources[typ]) == 0 {
			t.Errorf("%s: no resources held", typ)
		}
	}
	for name, s := range st.Secrets {
		if s.NACKs != 0 {
			t.Errorf("secret %s NACKed %d times: %s", name, s.NACKs, s.LastNACK)
		}
	}
	for _, w := range st.Warnings {
		t.Errorf("stand-in warning: %s", w)
	}

	// Envoy's order: CDS, its ACK, EDS for the clusters, its ACK; only then
	// LDS, its ACK, RDS for the listeners' routes, its ACK.
	var steps []string
	for _, e := range st.Events {
		if e.Stream == "ads" && e.Sent {
			steps = append(steps, e.Type+" "+e.What)
		}
	}
	want := []string{"CDS subscribe", "CDS ack", "EDS subscribe", "EDS ack", "LDS subscribe", "LDS ack", "RDS subscribe", "RDS ack"}
	at := -1
	for _, w := range want {
		i := slices.Index(steps, w)
		if i <= at {
			t.Errorf("ADS requests out of Envoy's order: %q first at %d, after step %d; sent: %v", w, i, at, steps)
			break
		}
		at = i
	}
	if st.Stats["cluster_manager.cds.update_success"] == 0 || st.Stats["listener_manager.lds.update_success"] == 0 {
		t.Errorf("stats: %v", st.Stats)
	}
	readiness := false
	for req := range st.Admin {
		switch {
		case strings.HasPrefix(req, "GET /stats?usedonly&filter="):
			readiness = true
		case strings.HasPrefix(req, "POST /drain_listeners?"):
		default:
			t.Errorf("the agent asked the stand-in's admin for %q, which it does not serve", req)
		}
	}
	if !readiness {
		t.Errorf("the agent never read the readiness stats; admin requests: %v", st.Admin)
	}
	var log []string
	for _, e := range st.Events {
		if e.Stream == "ads" {
			log = append(log, e.String())
		}
	}
	t.Logf("ADS exchange:\n  %s", strings.Join(log, "\n  "))
}

// standinConfig decodes what the stand-in holds.
type standinConfig struct {
	clusters  []*clusterv3.Cluster
	endpoints []*endpointv3.ClusterLoadAssignment
	listeners []*listenerv3.Listener
	routes    []*routev3.RouteConfiguration
}

func decodeStandin(t *testing.T, st *standinState) standinConfig {
	t.Helper()
	var c standinConfig
	decode := func(typ string, newMsg func() proto.Message, add func(proto.Message)) {
		for _, name := range slices.Sorted(maps.Keys(st.Resources[typ])) {
			m := newMsg()
			if err := protojson.Unmarshal(st.Resources[typ][name].Resource, m); err != nil {
				t.Fatalf("%s %s: %v", typ, name, err)
			}
			add(m)
		}
	}
	decode("CDS", func() proto.Message { return &clusterv3.Cluster{} }, func(m proto.Message) { c.clusters = append(c.clusters, m.(*clusterv3.Cluster)) })
	decode("EDS", func() proto.Message { return &endpointv3.ClusterLoadAssignment{} },
		func(m proto.Message) { c.endpoints = append(c.endpoints, m.(*endpointv3.ClusterLoadAssignment)) })
	decode("LDS", func() proto.Message { return &listenerv3.Listener{} }, func(m proto.Message) { c.listeners = append(c.listeners, m.(*listenerv3.Listener)) })
	decode("RDS", func() proto.Message { return &routev3.RouteConfiguration{} },
		func(m proto.Message) { c.routes = append(c.routes, m.(*routev3.RouteConfiguration)) })
	return c
}

// checkStandinEndpoints checks the echo Service's cluster and endpoints:
// EDS, with the pod's address on the target port, labelled for mTLS.
func checkStandinEndpoints(t *testing.T, st *standinState, w workload, svc *corev1.Service) {
	t.Helper()
	cfg := decodeStandin(t, st)
	name := fmt.Sprintf("outbound|%d||%s", envoyServicePort, envoyFQDN(svc))
	i := slices.IndexFunc(cfg.clusters, func(c *clusterv3.Cluster) bool { return c.GetName() == name })
	if i < 0 {
		t.Fatalf("no cluster %s among %d", name, len(cfg.clusters))
	}
	if c := cfg.clusters[i]; c.GetType() != clusterv3.Cluster_EDS {
		t.Errorf("%s: type %v, want EDS", name, c.GetType())
	}
	j := slices.IndexFunc(cfg.endpoints, func(c *endpointv3.ClusterLoadAssignment) bool { return c.GetClusterName() == name })
	if j < 0 {
		t.Fatalf("no endpoints for %s", name)
	}
	var got []string
	for _, le := range cfg.endpoints[j].GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			mode := lb.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			got = append(got, fmt.Sprintf("%s:%d tlsMode=%s", sa.GetAddress(), sa.GetPortValue(), mode))
		}
	}
	if want := fmt.Sprintf("%s:%d tlsMode=istio", w.IP, envoyTargetPort); len(got) != 1 || got[0] != want {
		t.Errorf("%s endpoints %v, want [%s]", name, got, want)
	}
}

func envoyFQDN(svc *corev1.Service) string {
	return svc.Name + "." + svc.Namespace + ".svc.cluster.local"
}

// checkStandinSimulation runs Istio's simulator on the listeners,
// clusters and routes the stand-in holds.
func checkStandinSimulation(t *testing.T, st *standinState, w workload, svc *corev1.Service) {
	t.Helper()
	cfg := decodeStandin(t, st)
	// A Simulation carries the *testing.T it fails on a config it cannot
	// read; only NewSimulation* set it, so one is built on an empty Istio
	// model and given the stand-in's config.
	cg := core.NewConfigGenTest(t, core.TestOptions{})
	sim := simulation.NewSimulationFromConfigGen(t, cg, cg.SetupProxy(nil))
	sim.Listeners, sim.Clusters, sim.Routes = cfg.listeners, cfg.clusters, cfg.routes

	fqdn := envoyFQDN(svc)
	outbound := fmt.Sprintf("outbound|%d||%s", envoyServicePort, fqdn)
	inbound := fmt.Sprintf("inbound|%d||", envoyTargetPort)
	calls := []struct {
		name    string
		call    simulation.Call
		cluster string // "" when the call must fail
	}{
		{"inbound mTLS HTTP to the target port", simulation.Call{CallMode: simulation.CallModeInbound,
			Address: w.IP, Port: envoyTargetPort, Protocol: simulation.HTTP, TLS: simulation.MTLS, Alpn: "istio-http/1.1"}, inbound},
		{"inbound mTLS HTTP/2 to the target port", simulation.Call{CallMode: simulation.CallModeInbound,
			Address: w.IP, Port: envoyTargetPort, Protocol: simulation.HTTP2, TLS: simulation.MTLS, Alpn: "istio-h2"}, inbound},
		{"inbound plaintext HTTP under STRICT", simulation.Call{CallMode: simulation.CallModeInbound,
			Address: w.IP, Port: envoyTargetPort, Protocol: simulation.HTTP}, ""},
		{"outbound HTTP to the FQDN", simulation.Call{CallMode: simulation.CallModeOutbound,
			Address: svc.Spec.ClusterIP, Port: envoyServicePort, Protocol: simulation.HTTP, HostHeader: fqdn}, outbound},
		{"outbound HTTP to the short name", simulation.Call{CallMode: simulation.CallModeOutbound,
			Address: svc.Spec.ClusterIP, Port: envoyServicePort, Protocol: simulation.HTTP, HostHeader: svc.Name}, outbound},
	}
	for _, c := range calls {
		r := sim.Run(c.call)
		got := fmt.Sprintf("error %v, listener %q, chain %q, route config %q, cluster %q",
			r.Error, r.ListenerMatched, r.FilterChainMatched, r.RouteConfigMatched, r.ClusterMatched)
		switch {
		case c.cluster == "" && r.Error == nil:
			t.Errorf("%s: %s; want refused", c.name, got)
		case c.cluster != "" && (r.Error != nil || r.ClusterMatched != c.cluster):
			t.Errorf("%s: %s; want cluster %q", c.name, got, c.cluster)
		default:
			t.Logf("%s: %s", c.name, got)
		}
	}
}

// inboundRBAC lists the RBAC filters on each filter chain of the
// stand-in's virtualInbound listener, by chain name (and destination port).
func inboundRBAC(st *standinState) (map[string][]string, error) {
	held, ok := st.Resources["LDS"]["virtualInbound"]
	if !ok {
		return nil, fmt.Errorf("no virtualInbound listener")
	}
	var l listenerv3.Listener
	if err := protojson.Unmarshal(held.Resource, &l); err != nil {
		return nil, fmt.Errorf("virtualInbound: %w", err)
	}
	const (
		networkRBAC = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"
		httpRBAC    = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	)
	out := map[string][]string{}
	for _, fc := range l.GetFilterChains() {
		key := fc.GetName()
		if p := fc.GetFilterChainMatch().GetDestinationPort(); p != nil {
			key += fmt.Sprintf(" (port %d)", p.GetValue())
		}
		rbac := []string{}
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			switch tc.GetTypeUrl() {
			case networkRBAC:
				rbac = append(rbac, "network "+f.GetName())
			case "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager":
				var hcm hcmv3.HttpConnectionManager
				if err := tc.UnmarshalTo(&hcm); err != nil {
					return nil, fmt.Errorf("chain %s: %w", key, err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetTypedConfig().GetTypeUrl() == httpRBAC {
						rbac = append(rbac, "http "+hf.GetName())
					}
				}
			}
		}
		out[key] = rbac
	}
	return out, nil
}

// secretLeaf is the leaf certificate of the stand-in's default secret.
func secretLeaf(t *testing.T, st *standinState) *x509.Certificate {
	t.Helper()
	s := st.Secrets["default"]
	if s == nil {
		return nil
	}
	certs := parseCerts(t, []byte(s.CertificateChain))
	if len(certs) == 0 {
		return nil
	}
	return certs[0]
}

// processAlive reports whether pid still runs (a zombie does not), giving
// a just-killed process a moment to go.
func processAlive(pid int) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return false
		}
	}
	return true
}
