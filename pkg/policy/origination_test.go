package policy

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// The generator asks for one client, the problem log and the webhook for
// the clients the rule reaches: one rule answers both, the namespace
// condition included.
func TestOriginationForAClientAndForTheClientsARuleReaches(t *testing.T) {
	credential := &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "ca"}
	for name, tc := range map[string]struct {
		scope  RuleScope
		client string
		want   error
	}{
		"a selecting rule, for a client of its namespace":       {RuleScope{"app", true}, "app", nil},
		"a selecting rule, for a client of another namespace":   {RuleScope{"app", true}, "other", ErrForeignCredential},
		"a rule for every client, for one of its namespace":     {RuleScope{"app", false}, "app", ErrForeignCredential},
		"a rule for every client, for one of another namespace": {RuleScope{"app", false}, "other", ErrForeignCredential},
	} {
		t.Run(name, func(t *testing.T) {
			if err := CheckOriginationFor(credential, OriginationOptions{}, tc.scope, tc.client); !errors.Is(err, tc.want) && err != tc.want {
				t.Errorf("CheckOriginationFor = %v, want %v", err, tc.want)
			}
			dr := &networking.DestinationRule{Host: "a", TrafficPolicy: &networking.TrafficPolicy{Tls: credential}}
			problems := OriginationProblems(tc.scope, dr, OriginationOptions{})
			// The clients a rule reaches are of its own namespace when it
			// selects workloads.
			reached := tc.scope.Selected
			if got := len(problems) == 0; got != reached {
				t.Errorf("OriginationProblems = %v, want none: %v", problems, reached)
			}
		})
	}
}

func TestOriginationProblemsNameEachSetting(t *testing.T) {
	insecure := &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)}
	dr := &networking.DestinationRule{
		Host: "echo",
		TrafficPolicy: &networking.TrafficPolicy{
			Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/ca.pem"},
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
				Port: &networking.PortSelector{Number: 443},
				Tls:  &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL},
			}},
		},
		Subsets: []*networking.Subset{{Name: "v1", TrafficPolicy: &networking.TrafficPolicy{Tls: insecure}}},
	}
	got := OriginationProblems(RuleScope{Namespace: "app"}, dr, OriginationOptions{})
	if len(got) != 2 || got[0].Where != "trafficPolicy port 443" || !errors.Is(got[0].Err, ErrMissingClientCert) ||
		got[0].Path != "spec.trafficPolicy.portLevelSettings[0].tls" ||
		got[1].Where != "subset v1" || !errors.Is(got[1].Err, ErrInsecureSkipVerify) || got[1].Path != "spec.subsets[0].trafficPolicy.tls" {
		t.Errorf("problems %+v", got)
	}
	got = OriginationProblems(RuleScope{Namespace: "app"}, dr, OriginationOptions{AllowInsecureSkipVerify: true})
	if len(got) != 2 || got[1].Where != "subset v1" || got[1].Err != nil {
		t.Errorf("problems with insecureSkipVerify allowed %+v", got)
	}
}
