package envoygen

import (
	"slices"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// TestRuleChangeGeneratesTheClustersItNames: after a DestinationRule
// change, a sidecar asked for the clusters the readers name (outbound
// ones and the inbound ones whose pool the rule sets) builds those and
// its inbound clusters, not every cluster it has; and what it builds is
// what the whole set holds under those names. Of a thousand sidecars of
// five hundred scopes, a subset added to one service would otherwise
// build every scope's every cluster.
func TestRuleChangeGeneratesTheClustersItNames(t *testing.T) {
	proxies := map[string]*Proxy{
		"a v1":     {Namespace: "a", Labels: map[string]string{"app": "svc-a0", "version": "v1"}, IPs: []string{"10.0.1.1"}},
		"b v1":     {Namespace: "b", Labels: map[string]string{"app": "svc-b0", "version": "v1"}, IPs: []string{"10.0.2.1"}},
		"b scoped": {Namespace: "b", Labels: map[string]string{"app": "svc-b3", "scope": "narrow"}, IPs: []string{"10.0.2.4"}},
	}
	g := &Generator{TrustDomain: td}
	tested := 0
	for name, tc := range ruleChangeCases {
		if !strings.Contains(tc.after, "kind: DestinationRule") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			before, after := modeltest.Load(t, rulesBase+tc.before), modeltest.Load(t, rulesBase+tc.after)
			r := ChangedRules(before, after, model.Diff(before, after))
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range r.Names(resource.ClusterType) {
					if !yield(n) {
						return
					}
				}
			})
			if len(names) == 0 {
				return
			}
			for pname, p := range proxies {
				all := g.Generate(after, p, resource.ClusterType, nil, true)
				inbound := 0
				for _, res := range all {
					if isInboundClusterName(res.Name) {
						inbound++
					}
				}
				b := &builder{g: g, snap: after, p: p, tel: g.Telemetry}
				built := b.sidecarResources(resource.ClusterType, names, false)
				unasked := 0
				for _, res := range built {
					if _, ok := slices.BinarySearch(names, res.Name); !ok {
						unasked++
					}
				}
				tested++
				t.Logf("%s: %d clusters named, %d built, %d of them not named; %d in the whole set", pname, len(names), len(built), unasked, len(all))
				if unasked > inbound {
					t.Errorf("%s: built %d clusters not named (of %d built for %d names), more than its %d inbound ones: the whole set for a few names",
						pname, unasked, len(built), len(names), inbound)
				}
				got := map[string]string{}
				for _, res := range g.Generate(after, p, resource.ClusterType, names, false) {
					got[res.Name] = marshalledOne(t, res)
				}
				for _, res := range all {
					if _, asked := slices.BinarySearch(names, res.Name); !asked {
						continue
					}
					if v, ok := got[res.Name]; !ok {
						t.Errorf("%s: %s is in the whole set, not built when named", pname, res.Name)
					} else if v != marshalledOne(t, res) {
						t.Errorf("%s: %s built when named differs from the whole set's", pname, res.Name)
					}
					delete(got, res.Name)
				}
				for n := range got {
					t.Errorf("%s: %s built when named, not in the whole set", pname, n)
				}
			}
		})
	}
	if tested == 0 {
		t.Fatal("no DestinationRule change named clusters")
	}
}

func marshalledOne(t *testing.T, r resource.Resource) string {
	t.Helper()
	raw, err := r.Marshal()
	if err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	return string(raw)
}
