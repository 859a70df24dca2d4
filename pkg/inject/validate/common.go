package validate

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	typev1beta1 "istio.io/api/type/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Small checks shared by the kinds. Each returns "" when the value is
// fine and otherwise the reason, without the field path.

// checkSelector checks a workload selector's matchLabels.
func checkSelector(p *problems, path string, sel *typev1beta1.WorkloadSelector) {
	if sel == nil {
		return
	}
	checkLabels(p, path+".matchLabels", sel.GetMatchLabels())
}

// checkLabels checks label keys and values by Kubernetes' rules.
func checkLabels(p *problems, path string, labels map[string]string) {
	for k, v := range labels {
		if k == "" {
			p.addf(path, "empty key is not allowed")
			continue
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			p.addf(path, "key %.80q is not a valid label key: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			p.addf(path+"["+truncate(k)+"]", "%.80q is not a valid label value: %s", v, errs[0])
		}
	}
}

// checkTargets checks that at most one of selector, targetRef and
// targetRefs is set, and each reference.
func checkTargets(p *problems, sel *typev1beta1.WorkloadSelector, ref *typev1beta1.PolicyTargetReference,
	refs []*typev1beta1.PolicyTargetReference,
) {
	set := 0
	if sel != nil {
		set++
	}
	if ref != nil {
		set++
	}
	if len(refs) > 0 {
		set++
	}
	if set > 1 {
		p.addf("spec", "only one of selector, targetRef and targetRefs may be set")
	}
	checkSelector(p, "spec.selector", sel)
	if ref != nil {
		checkTargetRef(p, "spec.targetRef", ref)
	}
	for i, r := range refs {
		checkTargetRef(p, at("spec.targetRefs", i), r)
	}
}

// targetKinds are the kinds a policy may target, by group.
var targetKinds = map[string]string{
	"Service":      "",
	"ServiceEntry": "networking.istio.io",
	"Gateway":      "gateway.networking.k8s.io",
}

func checkTargetRef(p *problems, path string, r *typev1beta1.PolicyTargetReference) {
	if r == nil {
		p.addf(path, "must not be null")
		return
	}
	if r.GetName() == "" {
		p.addf(path+".name", "must be set")
	}
	if r.GetNamespace() != "" {
		p.addf(path+".namespace", "must not be set: a policy cannot target another namespace")
	}
	group := r.GetGroup()
	if group == "core" {
		group = ""
	}
	if g, ok := targetKinds[r.GetKind()]; !ok || g != group {
		p.addf(path, "kind %.60q in group %.60q cannot be targeted (Service, networking.istio.io/ServiceEntry, gateway.networking.k8s.io/Gateway)",
			r.GetKind(), r.GetGroup())
	}
}

// checkPort reports a port number outside 1–65535.
func checkPort(port uint32) string {
	if port < 1 || port > 65535 {
		return "port " + strconv.FormatUint(uint64(port), 10) + " is not in 1-65535"
	}
	return ""
}

// checkPortString checks a decimal port number in a string.
func checkPortString(s string) string {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return "port " + quote(s) + " is not a number in 1-65535"
	}
	return ""
}

// checkIPBlock checks an IP address or CIDR range.
func checkIPBlock(s string) string {
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			return quote(s) + " is not a CIDR range"
		}
		return ""
	}
	if _, err := netip.ParseAddr(s); err != nil {
		return quote(s) + " is not an IP address"
	}
	return ""
}

// checkWildcardHost checks a DNS name whose first label may be "*" or
// start with "*", as Istio's hosts do.
func checkWildcardHost(h string) string {
	if h == "" {
		return "must not be empty"
	}
	if len(h) > 255 {
		return "host name is longer than 255 characters"
	}
	first, rest, hasRest := strings.Cut(h, ".")
	if !isWildcardLabel(first) {
		return "host " + quote(h) + " is not a DNS name (label " + quote(first) + ")"
	}
	if !hasRest {
		return ""
	}
	labels := strings.Split(rest, ".")
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return "host " + quote(h) + " has an all-numeric top-level domain"
	}
	for i, l := range labels {
		if i == len(labels)-1 && l == "" {
			break // a trailing dot
		}
		if len(validation.IsDNS1123Label(l)) > 0 {
			return "host " + quote(h) + " is not a DNS name (label " + quote(l) + ")"
		}
	}
	return ""
}

func isWildcardLabel(l string) bool {
	if l == "*" {
		return true
	}
	// "*foo" and "*-foo" are wildcard labels too.
	l, wild := strings.CutPrefix(l, "*")
	if wild {
		l = strings.TrimPrefix(l, "-")
	}
	return l != "" && len(validation.IsDNS1123Label(l)) == 0
}

var headerNameRE = regexp.MustCompile(`^[-_A-Za-z0-9]+$`)

// checkHeaderName checks an HTTP header name as Istio does.
func checkHeaderName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if !headerNameRE.MatchString(s) {
		return quote(s) + " is not a valid header name"
	}
	return ""
}

func quote(s string) string { return strconv.Quote(truncate(s)) }

// truncate bounds user text quoted in a reason.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
