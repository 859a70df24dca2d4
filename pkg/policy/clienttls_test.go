package policy

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

func TestClientTLSMergesAsIstioDoes(t *testing.T) {
	mode := func(m networking.ClientTLSSettings_TLSmode) *networking.ClientTLSSettings {
		return &networking.ClientTLSSettings{Mode: m}
	}
	portLevel := func(port uint32, s *networking.ClientTLSSettings) []*networking.TrafficPolicy_PortTrafficPolicy {
		return []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: port}, Tls: s}}
	}
	dr := &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
		Tls: mode(networking.ClientTLSSettings_ISTIO_MUTUAL), PortLevelSettings: portLevel(80, mode(networking.ClientTLSSettings_DISABLE)),
	}}
	subset := &networking.Subset{Name: "v1", TrafficPolicy: &networking.TrafficPolicy{
		Tls: mode(networking.ClientTLSSettings_SIMPLE), PortLevelSettings: portLevel(443, mode(networking.ClientTLSSettings_MUTUAL)),
	}}
	for name, tc := range map[string]struct {
		subset *networking.Subset
		port   uint32
		want   networking.ClientTLSSettings_TLSmode
	}{
		"the rule's port-level setting":    {nil, 80, networking.ClientTLSSettings_DISABLE},
		"the rule's":                       {nil, 8080, networking.ClientTLSSettings_ISTIO_MUTUAL},
		"the subset's port-level setting":  {subset, 443, networking.ClientTLSSettings_MUTUAL},
		"the subset's, over the rule's":    {subset, 80, networking.ClientTLSSettings_SIMPLE},
		"the rule's, for a subset without": {&networking.Subset{Name: "v2"}, 80, networking.ClientTLSSettings_DISABLE},
	} {
		if got := ClientTLS(dr, tc.subset, tc.port); got.GetMode() != tc.want {
			t.Errorf("%s: %v, want %v", name, got.GetMode(), tc.want)
		}
	}
	if got := ClientTLS(nil, nil, 80); got != nil {
		t.Errorf("no rule: %v", got)
	}
}
