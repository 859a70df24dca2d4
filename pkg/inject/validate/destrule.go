package validate

import (
	"k8s.io/apimachinery/pkg/util/validation"

	networking "istio.io/api/networking/v1alpha3"
)

func checkDestinationRule(p *problems, namespace string, dr *networking.DestinationRule) {
	if msg := checkWildcardHost(dr.GetHost()); msg != "" {
		p.addf("spec.host", "%s", msg)
	}
	checkTrafficPolicy(p, "spec.trafficPolicy", dr.GetTrafficPolicy())
	seen := map[string]bool{}
	for i, s := range dr.GetSubsets() {
		path := at("spec.subsets", i)
		if s == nil {
			p.addf(path, "must not be null")
			continue
		}
		switch {
		case s.GetName() == "":
			p.addf(path+".name", "must be set")
		case len(validation.IsDNS1123Label(s.GetName())) > 0:
			p.addf(path+".name", "%s is not a DNS label", quote(s.GetName()))
		case seen[s.GetName()]:
			p.addf(path+".name", "%s is used by another subset", quote(s.GetName()))
		}
		seen[s.GetName()] = true
		checkLabels(p, path+".labels", s.GetLabels())
		checkTrafficPolicy(p, path+".trafficPolicy", s.GetTrafficPolicy())
	}
	checkExportTo(p, namespace, dr.GetExportTo(), dr.GetWorkloadSelector() != nil)
	if sel := dr.GetWorkloadSelector(); sel != nil {
		checkSelector(p, "spec.workloadSelector", sel)
	}
}

func checkTrafficPolicy(p *problems, path string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	if tp.GetLoadBalancer() == nil && tp.GetConnectionPool() == nil && tp.GetOutlierDetection() == nil &&
		tp.GetTls() == nil && len(tp.GetPortLevelSettings()) == 0 && tp.GetTunnel() == nil &&
		tp.GetProxyProtocol() == nil && tp.GetRetryBudget() == nil {
		p.addf(path, "must set at least one field")
	}
	if tp.GetTunnel() != nil && tp.GetProxyProtocol() != nil {
		p.addf(path, "tunnel and proxyProtocol cannot be set together")
	}
	checkClientTLS(p, path+".tls", tp.GetTls())
	for i, pls := range tp.GetPortLevelSettings() {
		pp := at(path+".portLevelSettings", i)
		if pls == nil {
			p.addf(pp, "must not be null")
			continue
		}
		if pls.GetPort() == nil {
			p.addf(pp+".port", "must be set")
		} else if msg := checkPort(pls.GetPort().GetNumber()); msg != "" {
			p.addf(pp+".port.number", "%s", msg)
		}
		if pls.GetLoadBalancer() == nil && pls.GetConnectionPool() == nil &&
			pls.GetOutlierDetection() == nil && pls.GetTls() == nil {
			p.addf(pp, "must set at least one field besides port")
		}
		checkClientTLS(p, pp+".tls", pls.GetTls())
	}
}

func checkClientTLS(p *problems, path string, t *networking.ClientTLSSettings) {
	if t == nil {
		return
	}
	mode := t.GetMode()
	if _, ok := networking.ClientTLSSettings_TLSmode_name[int32(mode)]; !ok {
		p.addf(path+".mode", "%d is not one of DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL", int32(mode))
		return
	}
	simpleOrMutual := mode == networking.ClientTLSSettings_SIMPLE || mode == networking.ClientTLSSettings_MUTUAL
	if t.GetInsecureSkipVerify().GetValue() {
		switch {
		case mode == networking.ClientTLSSettings_SIMPLE &&
			(t.GetCaCertificates() != "" || t.GetCredentialName() != "" || len(t.GetSubjectAltNames()) > 0):
			p.addf(path+".insecureSkipVerify", "cannot be true with caCertificates, credentialName or subjectAltNames")
		case mode == networking.ClientTLSSettings_MUTUAL &&
			(t.GetCaCertificates() != "" || len(t.GetSubjectAltNames()) > 0):
			p.addf(path+".insecureSkipVerify", "cannot be true with caCertificates or subjectAltNames")
		}
	}
	if t.GetCredentialName() != "" {
		if !simpleOrMutual {
			p.addf(path+".credentialName", "may only be set with mode SIMPLE or MUTUAL, not %s", mode)
			return
		}
		if t.GetClientCertificate() != "" || t.GetPrivateKey() != "" || t.GetCaCertificates() != "" || t.GetCaCrl() != "" {
			p.addf(path+".credentialName", "cannot be set with clientCertificate, privateKey, caCertificates or caCrl")
		}
		return
	}
	if mode == networking.ClientTLSSettings_MUTUAL {
		if t.GetClientCertificate() == "" {
			p.addf(path+".clientCertificate", "must be set for mode MUTUAL without credentialName")
		}
		if t.GetPrivateKey() == "" {
			p.addf(path+".privateKey", "must be set for mode MUTUAL without credentialName")
		}
	}
}

// checkExportTo applies Istio's rules for a configuration object's
// exportTo: each entry ".", "*" or a namespace name ("~" is for Services
// and ServiceEntries only), none twice ("." is the object's namespace),
// "*" alone; a DestinationRule with a workloadSelector exported to its
// own namespace only.
func checkExportTo(p *problems, namespace string, exportTo []string, selected bool) {
	seen := map[string]bool{}
	valid := 0
	for i, e := range exportTo {
		key := e
		if e == "." {
			key = namespace
		}
		switch {
		case seen[key] && key != e:
			p.addf(at("spec.exportTo", i), "\".\" and the rule's namespace %s both name it", quote(namespace))
		case seen[key]:
			p.addf(at("spec.exportTo", i), "%s is listed twice", quote(e))
		case e == "~":
			p.addf(at("spec.exportTo", i), "\"~\" (no namespace) is for Services and ServiceEntries, not a DestinationRule")
		case e != "*" && e != "." && len(validation.IsDNS1123Label(e)) > 0:
			p.addf(at("spec.exportTo", i), "%s is not \".\", \"*\" or a namespace name", quote(e))
		default:
			seen[key] = true
			valid++
		}
	}
	if selected && valid > 0 {
		switch {
		case !seen[namespace]:
			p.addf("spec.exportTo", "a rule with a workloadSelector may be exported to its own namespace only")
		case len(seen) > 1:
			p.addf("spec.exportTo", "a rule with a workloadSelector may be exported to its own namespace only, not to others too")
		}
	}
	if seen["*"] && len(exportTo) > 1 {
		p.addf("spec.exportTo", "\"*\" must be the only entry")
	}
}
