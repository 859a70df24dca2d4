package report

import (
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// refusedNoEndpoints marks an origination problem that fails closed.
const refusedNoEndpoints = "refused, no endpoints"

// originationProblems say which SIMPLE or MUTUAL TLS settings of dr
// (rule, subsets, port-level) are refused for the clients the rule
// reaches (their clusters get no endpoints), and which skip verifying the
// server because istiod allows it: package policy's rule, which the
// generators and the webhook follow too.
func originationProblems(dr *model.DestinationRule, m envoygen.Mesh) []string {
	scope := policy.RuleScope{Namespace: dr.Namespace, Selected: dr.Spec.GetWorkloadSelector() != nil}
	var out []string
	for _, p := range policy.OriginationProblems(scope, dr.Spec, policy.OriginationOptions{AllowInsecureSkipVerify: m.AllowInsecureSkipVerify}) {
		if p.Err != nil {
			out = append(out, dr.Namespace+"/"+dr.Name+" "+p.Where+": "+refusedNoEndpoints+": "+p.Err.Error())
		} else {
			out = append(out, dr.Namespace+"/"+dr.Name+" "+p.Where+": the server is not verified (insecureSkipVerify, allowed by --allow-insecure-skip-verify)")
		}
	}
	return out
}
