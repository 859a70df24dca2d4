package policy

import (
	"regexp"
	"strconv"
	"strings"

	typev1beta1 "istio.io/api/type/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Checks the security kinds and DestinationRule share. Those returning a
// string return "" when the value is fine and otherwise the reason,
// without the field path.

// checkSelector checks a workload selector's matchLabels.
func checkSelector(f *Findings, path string, sel *typev1beta1.WorkloadSelector) {
	if sel == nil {
		return
	}
	checkSelectorLabels(f, path+".matchLabels", sel.GetMatchLabels())
}

// checkSelectorLabels checks label keys and values by Kubernetes' rules.
func checkSelectorLabels(f *Findings, path string, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		if k == "" {
			f.errorf(path, "empty key is not allowed")
			continue
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			f.errorf(path, "key %s is not a valid label key: %s", quote(k), errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			f.errorf(key(path, k), "%s is not a valid label value: %s", quote(v), errs[0])
		}
	}
}

// checkTargets checks that at most one of selector, targetRef and
// targetRefs is set, and each reference.
func checkTargets(f *Findings, sel *typev1beta1.WorkloadSelector, ref *typev1beta1.PolicyTargetReference,
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
		f.errorf("spec", "only one of selector, targetRef and targetRefs may be set")
	}
	checkSelector(f, "spec.selector", sel)
	if ref != nil {
		checkSecurityTargetRef(f, "spec.targetRef", ref)
	}
	for i, r := range refs {
		checkSecurityTargetRef(f, at("spec.targetRefs", i), r)
	}
}

// securityTargetKinds are the kinds a security policy may target, by
// group.
var securityTargetKinds = map[string]string{
	"Service":      "",
	"ServiceEntry": "networking.istio.io",
	"Gateway":      "gateway.networking.k8s.io",
}

func checkSecurityTargetRef(f *Findings, path string, r *typev1beta1.PolicyTargetReference) {
	if r == nil {
		f.errorf(path, "must not be null")
		return
	}
	if r.GetName() == "" {
		f.errorf(path+".name", "must be set")
	}
	if r.GetNamespace() != "" {
		f.errorf(path+".namespace", "must not be set: a policy cannot target another namespace")
	}
	group := r.GetGroup()
	if group == "core" {
		group = ""
	}
	if g, ok := securityTargetKinds[r.GetKind()]; !ok || g != group {
		f.errorf(path, "kind %s in group %s cannot be targeted (Service, networking.istio.io/ServiceEntry, gateway.networking.k8s.io/Gateway)",
			quote(r.GetKind()), quote(r.GetGroup()))
	}
}

// checkPortNumber reports a port number outside 1–65535.
func checkPortNumber(port uint32) string { return checkPort(int64(port)) }

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

var outputHeaderRE = regexp.MustCompile(`^[-_A-Za-z0-9]+$`)

// checkOutputHeader checks the name of a header a RequestAuthentication
// writes, as Istio does.
func checkOutputHeader(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if !outputHeaderRE.MatchString(s) {
		return quote(s) + " is not a valid header name"
	}
	return ""
}
