package interop

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/security/authn"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestPeerAuthenticationPrecedenceMatchesIstio gives random sets of
// PeerAuthentications (mesh, namespace and workload level, several per
// level with creation times that tie to the second, port-level modes,
// UNSET anywhere) to the model and, those that apply to the workload, to
// Istio's own ComposePeerAuthentication, and compares the mode of each
// port: the oldest policy of a level wins, then the first by name, and
// UNSET inherits.
func TestPeerAuthenticationPrecedenceMatchesIstio(t *testing.T) {
	const root, ns = "istio-system", "app"
	rng := rand.New(rand.NewPCG(10, 24))
	labels := map[string]string{"app": "echo"}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	modes := []securityv1beta1.PeerAuthentication_MutualTLS_Mode{
		securityv1beta1.PeerAuthentication_MutualTLS_UNSET, securityv1beta1.PeerAuthentication_MutualTLS_DISABLE,
		securityv1beta1.PeerAuthentication_MutualTLS_PERMISSIVE, securityv1beta1.PeerAuthentication_MutualTLS_STRICT,
	}
	names := []string{"default", "allow-legacy", "a", "z"}
	for round := range 3000 {
		var pas []*model.PeerAuthentication
		var applicable []*config.Config
		for _, policyNS := range []string{root, ns} {
			for _, name := range names[:rng.IntN(len(names)+1)] {
				spec := &securityv1beta1.PeerAuthentication{Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: modes[rng.IntN(len(modes))]}}
				matches := true
				if policyNS == ns && rng.IntN(2) == 0 {
					app := []string{"echo", "other"}[rng.IntN(2)]
					spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": app}}
					matches = app == "echo"
					if rng.IntN(2) == 0 {
						spec.PortLevelMtls = map[uint32]*securityv1beta1.PeerAuthentication_MutualTLS{
							8080: {Mode: modes[rng.IntN(len(modes))]},
						}
					}
				}
				created := base.Add(time.Duration(rng.IntN(3)) * time.Second)
				pas = append(pas, &model.PeerAuthentication{Meta: model.Meta{Namespace: policyNS, Name: name}, Created: created, Spec: spec})
				if matches {
					applicable = append(applicable, &config.Config{
						Meta: config.Meta{GroupVersionKind: gvk.PeerAuthentication, Namespace: policyNS, Name: name, CreationTimestamp: created},
						Spec: spec,
					})
				}
			}
		}
		// Istio hands the policies over oldest first, then by name and
		// namespace.
		slices.SortFunc(applicable, func(a, b *config.Config) int {
			return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
		})
		rng.Shuffle(len(pas), func(i, j int) { pas[i], pas[j] = pas[j], pas[i] })
		snap := model.Build("v", model.Options{RootNamespace: root}, model.Resources{PeerAuthentications: pas})
		merged := authn.ComposePeerAuthentication(root, applicable)
		for _, port := range []uint32{8080, 9090} {
			want := merged.Mode
			if m, ok := merged.PerPort[port]; ok {
				want = m
			}
			if got := snap.MTLSMode(ns, labels, port); got.String() != istioMode(want) {
				t.Fatalf("round %d, port %d: %s, Istio %s; policies:\n%s", round, port, got, istioMode(want), describePAs(pas))
			}
		}
	}
}

func istioMode(m istiomodel.MutualTLSMode) string {
	switch m {
	case istiomodel.MTLSStrict:
		return "STRICT"
	case istiomodel.MTLSDisable:
		return "DISABLE"
	default:
		return "PERMISSIVE"
	}
}

func describePAs(pas []*model.PeerAuthentication) string {
	out := ""
	for _, pa := range pas {
		out += fmt.Sprintf("  %s/%s created %s: %v\n", pa.Namespace, pa.Name, pa.Created.Format(time.TimeOnly), pa.Spec)
	}
	return out
}
