package model

import (
	"fmt"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
)

// BenchmarkDestinationRuleFor is what a sidecar's clusters cost in rule
// choosing: the rule of each of 1,000 services (10 namespaces) with a rule
// each, seen from a client of one namespace; one op chooses all 1,000.
func BenchmarkDestinationRuleFor(b *testing.B) {
	res := Resources{}
	for i := range 1000 {
		ns := fmt.Sprintf("ns-%d", i%10)
		name := fmt.Sprintf("svc-%d", i)
		res.Services = append(res.Services, &Service{Meta: Meta{Name: name, Namespace: ns}})
		res.DestinationRules = append(res.DestinationRules, &DestinationRule{
			Meta: Meta{Name: name, Namespace: ns},
			Spec: &networkingv1.DestinationRule{Host: name, TrafficPolicy: &networkingv1.TrafficPolicy{
				Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_ISTIO_MUTUAL},
			}},
		})
	}
	s := Build("bench", Options{}, res)
	labels := map[string]string{"app": "client"}
	b.ResetTimer()
	for range b.N {
		for _, svc := range s.Services() {
			if s.DestinationRuleFor(svc.Hostname, "ns-3", labels) == nil {
				b.Fatal("no rule")
			}
		}
	}
}
