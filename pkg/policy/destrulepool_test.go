package policy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
)

// TestDestinationRuleConnectionPoolValidated: the connection pools of a
// DestinationRule, which Envoy proxies apply, are checked as Istio's
// validateConnectionPool checks them, at the rule's and a port's level.
func TestDestinationRuleConnectionPoolValidated(t *testing.T) {
	port := func(cp *networking.ConnectionPoolSettings) []*networking.TrafficPolicy_PortTrafficPolicy {
		return []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 80}, ConnectionPool: cp}}
	}
	for name, tc := range map[string]struct {
		tp   *networking.TrafficPolicy
		want string // "" for valid
	}{
		"limits and timeouts": {tp: &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{
			Http: &networking.ConnectionPoolSettings_HTTPSettings{IdleTimeout: durationpb.New(30e9), MaxRequestsPerConnection: 3},
			Tcp:  &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 5},
		}}},
		"an empty pool": {tp: &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{}},
			want: "spec.trafficPolicy.connectionPool: needs http or tcp settings"},
		"a negative limit at a port's level": {tp: &networking.TrafficPolicy{PortLevelSettings: port(&networking.ConnectionPoolSettings{
			Http: &networking.ConnectionPoolSettings_HTTPSettings{MaxRetries: -1},
		})}, want: "spec.trafficPolicy.portLevelSettings[0].connectionPool.http.maxRetries: must not be negative"},
		"the client's protocol and an upgrade": {tp: &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{
			Http: &networking.ConnectionPoolSettings_HTTPSettings{UseClientProtocol: true, H2UpgradePolicy: networking.ConnectionPoolSettings_HTTPSettings_UPGRADE},
		}}, want: "useClientProtocol: must not be true with h2UpgradePolicy UPGRADE"},
	} {
		t.Run(name, func(t *testing.T) {
			f := ValidateDestinationRule("app", &networking.DestinationRule{Host: "a.app.svc.cluster.local", TrafficPolicy: tc.tp}, OriginationOptions{})
			got := strings.Join(f.Errors, "; ")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
}
