package xds

import (
	"fmt"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// refusedNoEndpoints marks an origination problem that fails closed.
const refusedNoEndpoints = "refused, no endpoints"

// originationProblems say which SIMPLE or MUTUAL TLS settings of dr
// (rule, subsets, port-level) are refused for every client (their
// clusters get no endpoints), and which skip verifying the server because
// istiod allows it.
func originationProblems(dr *model.DestinationRule, m envoygen.Mesh) []string {
	var out []string
	check := func(where string, s *networkingv1.ClientTLSSettings) {
		switch s.GetMode() {
		case networkingv1.ClientTLSSettings_SIMPLE, networkingv1.ClientTLSSettings_MUTUAL:
			err := envoygen.CheckOrigination(s, m)
			if err == nil && s.GetCredentialName() != "" && dr.Spec.GetWorkloadSelector() == nil {
				err = envoygen.ErrForeignCredential
			}
			switch {
			case err != nil:
				out = append(out, dr.Namespace+"/"+dr.Name+" "+where+": "+refusedNoEndpoints+": "+err.Error())
			case s.GetInsecureSkipVerify().GetValue():
				out = append(out, dr.Namespace+"/"+dr.Name+" "+where+": the server is not verified (insecureSkipVerify, allowed by --allow-insecure-skip-verify)")
			}
		}
	}
	policy := func(where string, tp *networkingv1.TrafficPolicy) {
		check(where, tp.GetTls())
		for _, pl := range tp.GetPortLevelSettings() {
			check(fmt.Sprintf("%s port %d", where, pl.GetPort().GetNumber()), pl.GetTls())
		}
	}
	policy("trafficPolicy", dr.Spec.GetTrafficPolicy())
	for _, ss := range dr.Spec.GetSubsets() {
		policy("subset "+ss.GetName(), ss.GetTrafficPolicy())
	}
	return out
}
