package envoygen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const echoIngress = `
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: echo, namespace: app}
spec:
  workloadSelector: {labels: {app: echo}}
  ingress:
  - {port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:8080"}
  - port: {number: 7070, protocol: HTTPS, name: https}
    defaultEndpoint: "0.0.0.0:7443"
    tls: {mode: SIMPLE, serverCertificate: /etc/c.pem, privateKey: /etc/k.pem}
    connectionPool: {tcp: {maxConnections: 7}}
  - {port: {number: 9000, protocol: TCP, name: tcp}, captureMode: NONE, defaultEndpoint: "unix:///var/run/a.sock"}
`

// chainsByPort describes virtualInbound's chains of each declared port:
// name, transport, TLS (mtls, tls or plain) and terminal cluster.
func chainsByPort(t *testing.T, l *listener.Listener) map[uint32][]string {
	t.Helper()
	out := map[uint32][]string{}
	for _, fc := range l.GetFilterChains() {
		port := fc.GetFilterChainMatch().GetDestinationPort().GetValue()
		if port == 0 || port == virtualInboundPort {
			continue
		}
		tls := "plain"
		if ts := fc.GetTransportSocket(); ts != nil {
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			tls = "tls:" + ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName()
		}
		terminal := "http"
		for _, f := range fc.GetFilters() {
			if f.GetName() == tcpProxyFilterName {
				tp := &tcpproxy.TcpProxy{}
				if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
					t.Fatal(err)
				}
				terminal = "tcp→" + tp.GetCluster()
			}
		}
		out[port] = append(out[port], fmt.Sprintf("%s %s %s %s", fc.GetName(), fc.GetFilterChainMatch().GetTransportProtocol(), tls, terminal))
	}
	return out
}

// TestSidecarIngressListeners: a Sidecar's ingress listeners replace the
// services' ports on virtualInbound and among the inbound clusters, with
// their endpoints, TLS and limits.
func TestSidecarIngressListeners(t *testing.T) {
	snap := modeltest.Load(t, manifests+echoIngress)
	echo := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo", "version": "v1"}, IPs: []string{"10.0.0.5"}}
	for name, tc := range map[string]struct {
		tls  bool
		want map[uint32][]string
	}{
		"with the tls switch": {tls: true, want: map[uint32][]string{
			9080: {"10.0.0.5_9080 tls tls:default http"},
			7070: {"10.0.0.5_7070 tls tls:file-cert:/etc/c.pem~/etc/k.pem http"},
		}},
		"without it, HTTPS is TCP": {want: map[uint32][]string{
			9080: {"10.0.0.5_9080 tls tls:default http"},
			7070: {"10.0.0.5_7070 raw_buffer plain tcp→inbound|7070||"},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{SidecarIngressTLS: tc.tls}}, snap, echo)
			got := chainsByPort(t, c.listeners[virtualInbound])
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("virtualInbound's chains\n got %v\nwant %v", got, tc.want)
			}
			var inbound []string
			for n := range c.clusters {
				if strings.HasPrefix(n, "inbound|") {
					inbound = append(inbound, n)
				}
			}
			slices.Sort(inbound)
			if want := []string{"inbound|7070||", "inbound|9000||", "inbound|9080||"}; !slices.Equal(inbound, want) {
				t.Fatalf("inbound clusters %q, want %q", inbound, want)
			}
			for name, want := range map[string]string{
				"inbound|9080||": "STATIC 127.0.0.1:8080 bind  conn 4294967295",
				"inbound|7070||": "STATIC 10.0.0.5:7443 bind 127.0.0.6 conn 7",
				"inbound|9000||": "STATIC unix:/var/run/a.sock bind 127.0.0.6 conn 4294967295",
			} {
				cl := c.clusters[name]
				a := cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
				ep := fmt.Sprintf("%s:%d", a.GetSocketAddress().GetAddress(), a.GetSocketAddress().GetPortValue())
				if p := a.GetPipe(); p != nil {
					ep = "unix:" + p.GetPath()
				}
				got := fmt.Sprintf("%s %s bind %s conn %d", cl.GetType(), ep, cl.GetUpstreamBindConfig().GetSourceAddress().GetAddress(),
					cl.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue())
				if got != want {
					t.Errorf("%s: %s, want %s", name, got, want)
				}
			}
		})
	}
}

// TestSidecarIngressScope: replicas differ by the chains named after
// their addresses and the clusters to them; a proxy the Sidecar does not
// select keeps its services' ports.
func TestSidecarIngressScope(t *testing.T) {
	snap := modeltest.Load(t, manifests+echoIngress)
	g := &Generator{TrustDomain: td}
	a := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}}
	b := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.7"}}
	if g.Scope(snap, a) == g.Scope(snap, b) {
		t.Error("two replicas share a scope, though their ingress chains and clusters name their own addresses")
	}
	ca, cb := generate(t, g, snap, a), generate(t, g, snap, b)
	if ea, eb := ca.clusters["inbound|7070||"].GetLoadAssignment(), cb.clusters["inbound|7070||"].GetLoadAssignment(); fmt.Sprint(ea) == fmt.Sprint(eb) {
		t.Errorf("both replicas' inbound|7070|| go to %v", ea)
	}
	sleep := generate(t, g, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{sleepIP}})
	if _, ok := sleep.clusters["inbound|9080||"]; ok {
		t.Error("sleep, which the Sidecar does not select, has its ingress cluster")
	}
}

// TestSidecarIngressTLSRefused: TLS settings that cannot be served (no
// certificate) refuse the port rather than serve it in plaintext.
func TestSidecarIngressTLSRefused(t *testing.T) {
	snap := modeltest.Load(t, manifests+`
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: echo, namespace: app}
spec:
  workloadSelector: {labels: {app: echo}}
  ingress:
  - {port: {number: 7070, protocol: HTTPS, name: https}, defaultEndpoint: "127.0.0.1:7443", tls: {mode: SIMPLE}}
`)
	c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{SidecarIngressTLS: true}}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}})
	got := chainsByPort(t, c.listeners[virtualInbound])
	if want := map[uint32][]string{7070: {"10.0.0.5_7070  plain tcp→BlackHoleCluster"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("chains %v, want %v", got, want)
	}
}

// TestSidecarInboundConnectionPool: a Sidecar's inboundConnectionPool sets
// the limits of the services' inbound clusters of the proxies it
// configures, and theirs only.
func TestSidecarInboundConnectionPool(t *testing.T) {
	snap := modeltest.Load(t, manifests+`
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: echo, namespace: app}
spec:
  workloadSelector: {labels: {app: echo}}
  inboundConnectionPool:
    tcp: {maxConnections: 10, connectTimeout: 2s, tcpKeepalive: {time: 60s, probes: 3}}
    http: {http1MaxPendingRequests: 5, maxRequestsPerConnection: 3, idleTimeout: 30s}
`)
	g := &Generator{TrustDomain: td}
	echo := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}}
	c := generate(t, g, snap, echo)
	cl := c.clusters["inbound|8080||"]
	th := cl.GetCircuitBreakers().GetThresholds()[0]
	if th.GetMaxConnections().GetValue() != 10 || th.GetMaxPendingRequests().GetValue() != 5 || cl.GetConnectTimeout().AsDuration().Seconds() != 2 {
		t.Errorf("inbound|8080||: thresholds %v, connect timeout %v", th, cl.GetConnectTimeout().AsDuration())
	}
	if ka := cl.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka.GetKeepaliveTime().GetValue() != 60 || ka.GetKeepaliveProbes().GetValue() != 3 {
		t.Errorf("inbound|8080||: keepalive %v", ka)
	}
	if cl.GetType() != cluster.Cluster_ORIGINAL_DST || len(cl.GetTypedExtensionProtocolOptions()) != 1 {
		t.Fatalf("inbound|8080||: %s with %d protocol options", cl.GetType(), len(cl.GetTypedExtensionProtocolOptions()))
	}
	opts := &httpopts.HttpProtocolOptions{}
	if err := cl.GetTypedExtensionProtocolOptions()[httpOptionsName].UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	// Envoy refuses HTTP options without an upstream protocol.
	if err := opts.ValidateAll(); err != nil || opts.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection().GetValue() != 3 {
		t.Errorf("inbound|8080||'s HTTP options %v: %v", opts, err)
	}
	// The inbound cluster of another workload's proxy is the shared one.
	other := &Proxy{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}}
	if th := generate(t, g, snap, other).clusters["inbound|8000||"].GetCircuitBreakers().GetThresholds()[0]; th.GetMaxConnections().GetValue() != 4294967295 {
		t.Errorf("web's inbound|8000||: %v", th)
	}
	var keyA, keyB string
	for _, r := range g.Generate(snap, echo, resource.ClusterType, nil, true) {
		if r.Name == "inbound|8080||" {
			keyA = r.Key
		}
	}
	plain := modeltest.Load(t, manifests)
	for _, r := range g.Generate(plain, echo, resource.ClusterType, nil, true) {
		if r.Name == "inbound|8080||" {
			keyB = r.Key
		}
	}
	if keyA == "" || keyA == keyB {
		t.Errorf("inbound|8080||'s key with the pool %q, without %q: proxies would share bytes that differ", keyA, keyB)
	}
}
