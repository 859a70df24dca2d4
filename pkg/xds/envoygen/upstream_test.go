package envoygen

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// upstreamOfCluster names how cl chooses its upstream HTTP version, with
// its idle timeout when it sets one.
func upstreamOfCluster(t *testing.T, cl *cluster.Cluster) string {
	t.Helper()
	a := cl.GetTypedExtensionProtocolOptions()[httpOptionsName]
	if a == nil {
		return "default"
	}
	o := &httpopts.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		t.Fatal(err)
	}
	out := "http1"
	switch {
	case o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil:
		out = "h2"
	case o.GetUseDownstreamProtocolConfig() != nil:
		out = "downstream"
	}
	if d := o.GetCommonHttpProtocolOptions().GetIdleTimeout(); d != nil {
		out += " idle " + d.AsDuration().String()
	}
	return out
}

// TestUpstreamProtocol: inbound and outbound clusters speak HTTP/2 to
// HTTP/2 and gRPC ports and the client's protocol to sniffed ones on
// sidecars; a DestinationRule's connectionPool applies to both, its and
// the mesh's h2UpgradePolicy to outbound clusters only; routers do not
// sniff.
func TestUpstreamProtocol(t *testing.T) {
	const upgrade = `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  trafficPolicy:
    connectionPool: {http: {h2UpgradePolicy: UPGRADE, idleTimeout: 30s}}
    portLevelSettings:
    - {port: {number: 5000}, connectionPool: {http: {useClientProtocol: true}}}
`
	echo := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo", "version": "v1"}, IPs: []string{"10.0.0.5"}}
	client := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}}
	router := &Proxy{Namespace: "app", Labels: map[string]string{"app": "gw"}, IPs: []string{"10.0.0.7"}, Router: true}
	for name, tc := range map[string]struct {
		extra string
		mesh  Mesh
		proxy *Proxy
		want  map[string]string
	}{
		"the workload's inbound clusters by port protocol": {proxy: echo, want: map[string]string{
			"inbound|8080||": "default", "inbound|9091||": "default", "inbound|7070||": "h2", "inbound|5001||": "downstream",
			"PassthroughCluster": "downstream idle 5m0s", "InboundPassthroughCluster": "downstream idle 5m0s",
		}},
		"a client's outbound clusters by port protocol": {proxy: client, want: map[string]string{
			"outbound|80||echo.app.svc.cluster.local": "default", "outbound|9090||echo.app.svc.cluster.local": "default",
			"outbound|7070||echo.app.svc.cluster.local": "h2", "outbound|5000||echo.app.svc.cluster.local": "downstream",
		}},
		"the rule upgrades every port, but a port-level useClientProtocol": {extra: upgrade, proxy: client, want: map[string]string{
			"outbound|80||echo.app.svc.cluster.local": "h2 idle 30s", "outbound|9090||echo.app.svc.cluster.local": "h2 idle 30s",
			"outbound|7070||echo.app.svc.cluster.local": "h2 idle 30s", "outbound|5000||echo.app.svc.cluster.local": "downstream",
		}},
		"the rule's pool, not its upgrade, reaches the workload's inbound clusters": {extra: upgrade, proxy: echo, want: map[string]string{
			"inbound|8080||": "http1 idle 30s", "inbound|7070||": "h2 idle 30s", "inbound|5001||": "downstream",
		}},
		"the mesh upgrades HTTP ports only": {mesh: Mesh{H2Upgrade: true}, proxy: client, want: map[string]string{
			"outbound|80||echo.app.svc.cluster.local": "h2", "outbound|9090||echo.app.svc.cluster.local": "default",
			"outbound|5000||echo.app.svc.cluster.local": "downstream",
		}},
		"a router keeps HTTP/1.1 to a sniffed port": {proxy: router, want: map[string]string{
			"outbound|5000||echo.app.svc.cluster.local": "default", "outbound|7070||echo.app.svc.cluster.local": "h2",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, manifests+tc.extra)
			c := generate(t, &Generator{TrustDomain: td, Mesh: tc.mesh}, snap, tc.proxy)
			for n, want := range tc.want {
				cl, ok := c.clusters[n]
				if !ok {
					t.Errorf("no cluster %s", n)
					continue
				}
				if got := upstreamOfCluster(t, cl); got != want {
					t.Errorf("%s: upstream %s, want %s", n, got, want)
				}
			}
		})
	}
}

// TestBadConnectionPoolLeavesTheClusterOut: a pool Envoy would reject
// (a negative timeout, past validation) fails its cluster's build alone.
func TestBadConnectionPoolLeavesTheClusterOut(t *testing.T) {
	snap := modeltest.Load(t, manifests+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  trafficPolicy:
    portLevelSettings:
    - {port: {number: 80}, connectionPool: {http: {idleTimeout: -5s}}}
`)
	for _, p := range []*Proxy{
		{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}},
		{Namespace: "app", Labels: map[string]string{"app": "echo", "version": "v1"}, IPs: []string{"10.0.0.5"}},
	} {
		failed := map[string]bool{}
		for _, r := range (&Generator{TrustDomain: td}).Generate(snap, p, resource.ClusterType, nil, true) {
			if _, err := r.Marshal(); err != nil {
				failed[r.Name] = true
			}
		}
		want := map[string]bool{"outbound|80||echo.app.svc.cluster.local": true}
		if p.Labels["app"] == "echo" {
			want = map[string]bool{"outbound|80||echo.app.svc.cluster.local": true, "inbound|8080||": true}
		}
		if len(failed) != len(want) {
			t.Errorf("%s: failed %v, want %v", p.Labels["app"], failed, want)
		}
		for n := range want {
			if !failed[n] {
				t.Errorf("%s: %s built, want it refused", p.Labels["app"], n)
			}
		}
	}
}
