package report

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

func TestOriginationProblemsNameEachRefusedSetting(t *testing.T) {
	insecure := &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)}
	dr := &model.DestinationRule{Spec: &networkingv1.DestinationRule{
		Host: "echo",
		TrafficPolicy: &networkingv1.TrafficPolicy{
			Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, CaCertificates: "/ca.pem"},
			PortLevelSettings: []*networkingv1.TrafficPolicy_PortTrafficPolicy{{
				Port: &networkingv1.PortSelector{Number: 443},
				Tls:  &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_MUTUAL},
			}},
		},
		Subsets: []*networkingv1.Subset{{Name: "v1", TrafficPolicy: &networkingv1.TrafficPolicy{Tls: insecure}}},
	}}
	dr.Namespace, dr.Name = "app", "echo"

	credential := &model.DestinationRule{Spec: &networkingv1.DestinationRule{
		Host:          "echo",
		TrafficPolicy: &networkingv1.TrafficPolicy{Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, CredentialName: "ca"}},
	}}
	if got := originationProblems(credential, envoygen.Mesh{}); len(got) != 1 || !strings.Contains(got[0], "workloadSelector") {
		t.Errorf("credentialName without a selector: problems %q", got)
	}
	credential.Spec.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "sleep"}}
	if got := originationProblems(credential, envoygen.Mesh{}); len(got) != 0 {
		t.Errorf("credentialName with a selector: problems %q", got)
	}

	got := originationProblems(dr, envoygen.Mesh{})
	if len(got) != 2 || !strings.Contains(got[0], "port 443: refused") || !strings.Contains(got[1], "subset v1: refused") ||
		!strings.Contains(got[1], "insecureSkipVerify") {
		t.Errorf("problems %q", got)
	}
	got = originationProblems(dr, envoygen.Mesh{AllowInsecureSkipVerify: true})
	if len(got) != 2 || !strings.Contains(got[1], "subset v1: the server is not verified") {
		t.Errorf("problems with insecureSkipVerify allowed %q", got)
	}
}
