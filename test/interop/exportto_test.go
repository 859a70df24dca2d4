package interop

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// TestDestinationRuleExportToClusterTLS is the failure the mesh traffic
// issue names, on the clusters both generators emit: a DestinationRule
// that namespace app exports only to itself, with tls DISABLE, makes its
// own clients' cluster to echo plaintext and leaves another namespace's
// on auto-mTLS; a root-namespace rule for *.partner.svc.cluster.local with
// tls DISABLE makes every client's cluster to partner's api plaintext.
// Istio's generator and ours (Envoy sidecars) must agree on every
// cluster's TLS, and proxyless gRPC, which chooses its rule through the
// same function, must agree on plaintext or mTLS.
func TestDestinationRuleExportToClusterTLS(t *testing.T) {
	quietIstioLogs(t)
	objects := decodeKube(t, sidecarWorld+partnerWorld)
	pods := map[string]*corev1.Pod{}
	for _, o := range objects {
		if p, ok := o.(*corev1.Pod); ok {
			pods[p.Namespace+"/"+p.Name] = p
		}
	}
	for name, tc := range map[string]struct {
		rules     string
		cluster   string
		plaintext map[string]bool // by client pod
	}{
		"a rule exported to its own namespace": {
			rules: dr("app", "echo", t1, `
  host: echo
  exportTo: ["."]
  trafficPolicy: {tls: {mode: DISABLE}}`),
			cluster:   "outbound|80||echo.app.svc.cluster.local",
			plaintext: map[string]bool{"app/sleep-1": true, "other/backend-1": false},
		},
		"a root namespace wildcard rule": {
			rules: dr("istio-system", "partner", t1, `
  host: "*.partner.svc.cluster.local"
  trafficPolicy: {tls: {mode: DISABLE}}`),
			cluster:   "outbound|80||api.partner.svc.cluster.local",
			plaintext: map[string]bool{"app/sleep-1": true, "other/backend-1": true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := drIstioServer(t, tc.rules, nil, nil)
			snap := ourSnapshot(t, objects, tc.rules)
			for key, plaintext := range tc.plaintext {
				pod := pods[key]
				istio := clusterNamed(s.Clusters(istioProxy(s, pod)), tc.cluster)
				ours := clusterNamed(ourConfig(t, snap, sidecarScenario{}, pod).clusters, tc.cluster)
				if istio == nil || ours == nil {
					t.Fatalf("%s: cluster %s: istio has it %t, ours %t", key, tc.cluster, istio != nil, ours != nil)
				}
				if got, want := clusterTLS(ours), clusterTLS(istio); got != want {
					t.Errorf("%s: cluster %s TLS:\n  istio: %s\n  ours:  %s", key, tc.cluster, want, got)
				}
				if got := clusterTLS(istio) == "plaintext"; got != plaintext {
					t.Errorf("%s: Istio's cluster %s plaintext %t, want %t", key, tc.cluster, got, plaintext)
				}
				if got := grpcPlaintext(t, snap, pod, tc.cluster); got != plaintext {
					t.Errorf("%s: proxyless cluster %s plaintext %t, want %t", key, tc.cluster, got, plaintext)
				}
			}
		})
	}
}

func clusterNamed(cs []*clusterv3.Cluster, name string) *clusterv3.Cluster {
	for _, c := range cs {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// grpcPlaintext reports whether proxyless gRPC's cluster name for pod
// has no transport socket.
func grpcPlaintext(t *testing.T, snap *model.Snapshot, pod *corev1.Pod, name string) bool {
	t.Helper()
	g := &grpcgen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain)}
	rs := g.Generate(snap, &grpcgen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels}, grpcgen.ClusterType, []string{name}, false)
	if len(rs) != 1 {
		t.Fatalf("proxyless: %d clusters named %s", len(rs), name)
	}
	msg, err := rs[0].Message(grpcgen.ClusterType)
	if err != nil {
		t.Fatalf("proxyless cluster %s: %v", name, err)
	}
	return msg.(*clusterv3.Cluster).GetTransportSocket() == nil
}

// TestServiceExportToMatchesIstio compares, for sidecars of three
// namespaces, what Istio's generator and ours give them of partner's
// services, two of which are exported to some namespaces only (see
// partnerWorld), with and without the mesh's defaultServiceExportTo: the
// outbound clusters, the listeners on their addresses and ports, and the
// virtual hosts of the routes. Hidden services must leave no trace.
func TestServiceExportToMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	objects := decodeKube(t, sidecarWorld+partnerWorld)
	pods := map[string]*corev1.Pod{}
	for _, o := range objects {
		if p, ok := o.(*corev1.Pod); ok {
			pods[p.Namespace+"/"+p.Name] = p
		}
	}
	for name, defaults := range map[string][]string{"mesh default": nil, "mesh default '.'": {"."}} {
		t.Run(name, func(t *testing.T) {
			s := drIstioServer(t, "", defaults, nil)
			snap := ourSnapshot(t, objects, "").WithExportDefaults(defaults, nil)
			for _, key := range []string{"app/sleep-1", "other/backend-1", "partner/api-1"} {
				pod := pods[key]
				proxy := istioProxy(s, pod)
				istio := &sidecarResources{clusters: s.Clusters(proxy), listeners: s.Listeners(proxy), routes: s.Routes(proxy)}
				ours := ourConfig(t, snap, sidecarScenario{}, pod)
				want, got := partnerTraces(istio), partnerTraces(ours)
				if want != got {
					t.Errorf("%s sees of partner's services:\n  istio: %s\n  ours:  %s", key, want, got)
				}
				// Not vacuous: each sidecar sees what it should, both ways.
				for svc, visible := range map[string]bool{
					"cluster outbound|81||internal.partner": key == "partner/api-1",
					"cluster outbound|82||shared.partner":   key != "other/backend-1",
					"cluster outbound|80||api.partner":      defaults == nil || key == "partner/api-1",
				} {
					if strings.Contains(got, svc) != visible {
						t.Errorf("%s: %q visible %t, want %t: %s", key, svc, !visible, visible, got)
					}
				}
			}
		})
	}
}

// partnerTraces lists, sorted, what of the partner namespace's services
// a sidecar's configuration holds: outbound clusters, listeners bound to
// their addresses or on their HTTP ports 81 and 82, and virtual host
// domains.
func partnerTraces(cfg *sidecarResources) string {
	var out []string
	for _, c := range cfg.clusters {
		if strings.HasPrefix(c.GetName(), "outbound|") && strings.Contains(c.GetName(), ".partner.svc.") {
			out = append(out, "cluster "+c.GetName())
		}
	}
	for _, l := range cfg.listeners {
		if n := l.GetName(); strings.HasPrefix(n, "10.96.2.") || n == "0.0.0.0_81" || n == "0.0.0.0_82" {
			out = append(out, "listener "+n)
		}
	}
	for _, r := range cfg.routes {
		for _, vh := range r.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if strings.Contains(d, "partner") {
					out = append(out, "route "+r.GetName()+" "+d)
				}
			}
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}
