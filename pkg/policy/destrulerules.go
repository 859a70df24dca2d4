package policy

import (
	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateDestinationRule checks a DestinationRule of namespace as the
// validating webhook does: Istio's rules, then the rule of SIMPLE and
// MUTUAL TLS the generators apply (OriginationProblems under opts): a
// setting they refuse for every client the rule reaches is refused, one
// that skips verifying the server is admitted with a warning.
func ValidateDestinationRule(namespace string, dr *networking.DestinationRule, opts OriginationOptions) Findings {
	var f Findings
	invalid := map[string]bool{} // TLS settings Istio's rules refuse, by path
	f.check("spec.host", checkWildcardHost(dr.GetHost()))
	checkTrafficPolicy(&f, invalid, "spec.trafficPolicy", dr.GetTrafficPolicy())
	seen := map[string]bool{}
	for i, s := range dr.GetSubsets() {
		path := at("spec.subsets", i)
		if s == nil {
			f.errorf(path, "must not be null")
			continue
		}
		switch {
		case s.GetName() == "":
			f.errorf(path+".name", "must be set")
		case len(validation.IsDNS1123Label(s.GetName())) > 0:
			f.errorf(path+".name", "%s is not a DNS label", quote(s.GetName()))
		case seen[s.GetName()]:
			f.errorf(path+".name", "%s is used by another subset", quote(s.GetName()))
		}
		seen[s.GetName()] = true
		checkSelectorLabels(&f, path+".labels", s.GetLabels())
		checkTrafficPolicy(&f, invalid, path+".trafficPolicy", s.GetTrafficPolicy())
	}
	checkRuleExportTo(&f, namespace, dr.GetExportTo(), dr.GetWorkloadSelector() != nil)
	if sel := dr.GetWorkloadSelector(); sel != nil {
		checkSelector(&f, "spec.workloadSelector", sel)
	}
	scope := RuleScope{Namespace: namespace, Selected: dr.GetWorkloadSelector() != nil}
	for _, p := range OriginationProblems(scope, dr, opts) {
		switch {
		case invalid[p.Path]:
		case p.Err != nil:
			f.errorf(p.Path, "refused by this istiod, whose clusters for it would get no endpoints: %s", p.Err.Error())
		default:
			f.warnf(p.Path+".insecureSkipVerify", "the server is not verified (allowed by --allow-insecure-skip-verify)")
		}
	}
	return f
}

func checkTrafficPolicy(f *Findings, invalid map[string]bool, path string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	if tp.GetLoadBalancer() == nil && tp.GetConnectionPool() == nil && tp.GetOutlierDetection() == nil &&
		tp.GetTls() == nil && len(tp.GetPortLevelSettings()) == 0 && tp.GetTunnel() == nil &&
		tp.GetProxyProtocol() == nil && tp.GetRetryBudget() == nil {
		f.errorf(path, "must set at least one field")
	}
	if tp.GetTunnel() != nil && tp.GetProxyProtocol() != nil {
		f.errorf(path, "tunnel and proxyProtocol cannot be set together")
	}
	checkClientTLS(f, invalid, path+".tls", tp.GetTls())
	checkConnectionPool(f, path+".connectionPool", tp.GetConnectionPool())
	for i, pls := range tp.GetPortLevelSettings() {
		pp := at(path+".portLevelSettings", i)
		if pls == nil {
			f.errorf(pp, "must not be null")
			continue
		}
		if pls.GetPort() == nil {
			f.errorf(pp+".port", "must be set")
		} else {
			f.check(pp+".port.number", checkPortNumber(pls.GetPort().GetNumber()))
		}
		if pls.GetLoadBalancer() == nil && pls.GetConnectionPool() == nil &&
			pls.GetOutlierDetection() == nil && pls.GetTls() == nil {
			f.errorf(pp, "must set at least one field besides port")
		}
		checkClientTLS(f, invalid, pp+".tls", pls.GetTls())
		checkConnectionPool(f, pp+".connectionPool", pls.GetConnectionPool())
	}
}

// checkClientTLS applies Istio's rules to TLS settings, and marks them in
// invalid when it refuses them.
func checkClientTLS(f *Findings, invalid map[string]bool, path string, t *networking.ClientTLSSettings) {
	if t == nil {
		return
	}
	before := len(f.Errors) + f.MoreErrors
	defer func() {
		if len(f.Errors)+f.MoreErrors > before {
			invalid[path] = true
		}
	}()
	mode := t.GetMode()
	if _, ok := networking.ClientTLSSettings_TLSmode_name[int32(mode)]; !ok {
		f.errorf(path+".mode", "%d is not one of DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL", int32(mode))
		return
	}
	if t.GetInsecureSkipVerify().GetValue() {
		switch {
		case mode == networking.ClientTLSSettings_SIMPLE &&
			(t.GetCaCertificates() != "" || t.GetCredentialName() != "" || len(t.GetSubjectAltNames()) > 0):
			f.errorf(path+".insecureSkipVerify", "cannot be true with caCertificates, credentialName or subjectAltNames")
		case mode == networking.ClientTLSSettings_MUTUAL &&
			(t.GetCaCertificates() != "" || len(t.GetSubjectAltNames()) > 0):
			f.errorf(path+".insecureSkipVerify", "cannot be true with caCertificates or subjectAltNames")
		}
	}
	if t.GetCredentialName() != "" {
		if !Originates(t) {
			f.errorf(path+".credentialName", "may only be set with mode SIMPLE or MUTUAL, not %s", mode)
			return
		}
		if t.GetClientCertificate() != "" || t.GetPrivateKey() != "" || t.GetCaCertificates() != "" || t.GetCaCrl() != "" {
			f.errorf(path+".credentialName", "cannot be set with clientCertificate, privateKey, caCertificates or caCrl")
		}
		return
	}
	if mode == networking.ClientTLSSettings_MUTUAL {
		if t.GetClientCertificate() == "" {
			f.errorf(path+".clientCertificate", "must be set for mode MUTUAL without credentialName")
		}
		if t.GetPrivateKey() == "" {
			f.errorf(path+".privateKey", "must be set for mode MUTUAL without credentialName")
		}
	}
}

// checkRuleExportTo applies Istio's rules for a DestinationRule's
// exportTo: each entry ".", "*" or a namespace name ("~" is for Services
// and ServiceEntries only), none twice ("." is the rule's namespace), "*"
// alone; a rule with a workloadSelector exported to its own namespace
// only.
func checkRuleExportTo(f *Findings, namespace string, exportTo []string, selected bool) {
	seen := map[string]bool{}
	valid := 0
	for i, e := range exportTo {
		k := e
		if e == "." {
			k = namespace
		}
		switch {
		case seen[k] && k != e:
			f.errorf(at("spec.exportTo", i), "\".\" and the rule's namespace %s both name it", quote(namespace))
		case seen[k]:
			f.errorf(at("spec.exportTo", i), "%s is listed twice", quote(e))
		case e == "~":
			f.errorf(at("spec.exportTo", i), "\"~\" (no namespace) is for Services and ServiceEntries, not a DestinationRule")
		case e != "*" && e != "." && len(validation.IsDNS1123Label(e)) > 0:
			f.errorf(at("spec.exportTo", i), "%s is not \".\", \"*\" or a namespace name", quote(e))
		default:
			seen[k] = true
			valid++
		}
	}
	if selected && valid > 0 {
		switch {
		case !seen[namespace]:
			f.errorf("spec.exportTo", "a rule with a workloadSelector may be exported to its own namespace only")
		case len(seen) > 1:
			f.errorf("spec.exportTo", "a rule with a workloadSelector may be exported to its own namespace only, not to others too")
		}
	}
	if seen["*"] && len(exportTo) > 1 {
		f.errorf("spec.exportTo", "\"*\" must be the only entry")
	}
}
