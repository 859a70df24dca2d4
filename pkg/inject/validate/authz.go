package validate

import (
	"bytes"
	"encoding/json"
	"strconv"

	security "istio.io/api/security/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dryRunAnnotation marks an AuthorizationPolicy as evaluated but not
// enforced.
const dryRunAnnotation = "istio.io/dry-run"

func checkDryRun(p *problems, meta *metav1.ObjectMeta, ap *security.AuthorizationPolicy) {
	v, ok := meta.Annotations[dryRunAnnotation]
	if !ok {
		return
	}
	path := "metadata.annotations[" + dryRunAnnotation + "]"
	switch ap.GetAction() {
	case security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY:
	default:
		p.addf(path, "only ALLOW and DENY policies can be dry-run")
		return
	}
	if _, err := strconv.ParseBool(v); err != nil {
		p.addf(path, "%s is not a boolean", quote(v))
	}
}

// checkEmptyRuleLists refuses `from: []` and `to: []`, which decode to the
// same message as an absent list but say something else: Istio refuses
// them rather than guess.
func checkEmptyRuleLists(p *problems, raw []byte) {
	if raw == nil {
		return
	}
	var spec struct {
		Rules []map[string]json.RawMessage `json:"rules"`
	}
	if json.Unmarshal(raw, &spec) != nil {
		return // protojson accepted it; a shape json cannot read has no lists to check
	}
	for i, r := range spec.Rules {
		for _, f := range []string{"from", "to"} {
			if v, ok := r[f]; ok && isEmptyList(v) {
				p.addf(at("spec.rules", i)+"."+f, "must not be an empty list: omit it to match any")
			}
		}
	}
}

func isEmptyList(v json.RawMessage) bool {
	var l []json.RawMessage
	return bytes.HasPrefix(bytes.TrimSpace(v), []byte("[")) && json.Unmarshal(v, &l) == nil && len(l) == 0
}

func checkAuthorizationPolicy(p *problems, ap *security.AuthorizationPolicy) {
	checkTargets(p, ap.GetSelector(), ap.GetTargetRef(), ap.GetTargetRefs())
	action := ap.GetAction()
	if _, ok := security.AuthorizationPolicy_Action_name[int32(action)]; !ok {
		p.addf("spec.action", "%d is not one of ALLOW, DENY, AUDIT, CUSTOM", int32(action))
	}
	custom := action == security.AuthorizationPolicy_CUSTOM
	switch {
	case custom && ap.GetProvider().GetName() == "":
		p.addf("spec.provider.name", "must be set for action CUSTOM")
	case !custom && ap.GetProvider() != nil:
		p.addf("spec.provider", "may only be set with action CUSTOM, not %s", action)
	}
	if ap.GetRules() == nil && (custom || action == security.AuthorizationPolicy_DENY) {
		p.addf("spec.rules", "a %s policy without rules never applies; add an empty rule {} to match every request", action)
	}
	for i, r := range ap.GetRules() {
		checkRule(p, at("spec.rules", i), r, custom)
	}
}

func checkRule(p *problems, path string, r *security.Rule, custom bool) {
	if r == nil {
		p.addf(path, "must not be null")
		return
	}
	for i, f := range r.GetFrom() {
		fp := at(path+".from", i)
		switch {
		case f == nil:
			p.addf(fp, "must not be null")
		case f.GetSource() == nil:
			p.addf(fp+".source", "must be set")
		default:
			checkSource(p, fp+".source", f.GetSource(), custom)
		}
	}
	for i, t := range r.GetTo() {
		tp := at(path+".to", i)
		switch {
		case t == nil:
			p.addf(tp, "must not be null")
		case t.GetOperation() == nil:
			p.addf(tp+".operation", "must be set")
		default:
			checkOperation(p, tp+".operation", t.GetOperation())
		}
	}
	for i, c := range r.GetWhen() {
		checkCondition(p, at(path+".when", i), c, custom)
	}
}

// stringList is one repeated field of a Source or Operation with the check
// for each of its values.
type stringList struct {
	name   string
	values []string
	check  func(string) string
	// noCustom marks fields a CUSTOM policy cannot match on.
	noCustom bool
}

func checkSource(p *problems, path string, s *security.Source, custom bool) {
	lists := []stringList{
		{"principals", s.GetPrincipals(), checkPrincipal, true},
		{"notPrincipals", s.GetNotPrincipals(), checkPrincipal, true},
		{"requestPrincipals", s.GetRequestPrincipals(), nonEmpty, true},
		{"notRequestPrincipals", s.GetNotRequestPrincipals(), nonEmpty, true},
		{"namespaces", s.GetNamespaces(), checkNamespace, true},
		{"notNamespaces", s.GetNotNamespaces(), checkNamespace, true},
		{"serviceAccounts", s.GetServiceAccounts(), checkServiceAccount, false},
		{"notServiceAccounts", s.GetNotServiceAccounts(), checkServiceAccount, false},
		{"ipBlocks", s.GetIpBlocks(), checkIPBlock, false},
		{"notIpBlocks", s.GetNotIpBlocks(), checkIPBlock, false},
		{"remoteIpBlocks", s.GetRemoteIpBlocks(), checkIPBlock, false},
		{"notRemoteIpBlocks", s.GetNotRemoteIpBlocks(), checkIPBlock, false},
		{"trustDomains", s.GetTrustDomains(), nonEmpty, false},
		{"notTrustDomains", s.GetNotTrustDomains(), nonEmpty, false},
	}
	checkLists(p, path, lists, custom)
	for _, l := range []stringList{lists[6], lists[7]} {
		if len(l.values) > 16 {
			p.addf(path+"."+l.name, "may hold at most 16 values")
		}
	}
}

func checkOperation(p *problems, path string, o *security.Operation) {
	checkLists(p, path, []stringList{
		{name: "hosts", values: o.GetHosts(), check: nonEmpty},
		{name: "notHosts", values: o.GetNotHosts(), check: nonEmpty},
		{name: "ports", values: o.GetPorts(), check: checkPortString},
		{name: "notPorts", values: o.GetNotPorts(), check: checkPortString},
		{name: "methods", values: o.GetMethods(), check: checkMethod},
		{name: "notMethods", values: o.GetNotMethods(), check: checkMethod},
		{name: "paths", values: o.GetPaths(), check: checkPath},
		{name: "notPaths", values: o.GetNotPaths(), check: checkPath},
	}, false)
}

// checkLists checks every value of every list, and refuses a source or
// operation in which all lists are empty.
func checkLists(p *problems, path string, lists []stringList, custom bool) {
	empty := true
	for _, l := range lists {
		if len(l.values) == 0 {
			continue
		}
		empty = false
		if custom && l.noCustom {
			p.addf(path+"."+l.name, "cannot be used with action CUSTOM")
		}
		for i, v := range l.values {
			if msg := l.check(v); msg != "" {
				p.addf(at(path+"."+l.name, i), "%s", msg)
			}
		}
	}
	if empty {
		p.addf(path, "must not be empty: set at least one field")
	}
}

func checkCondition(p *problems, path string, c *security.Condition, custom bool) {
	if c == nil {
		p.addf(path, "must not be null")
		return
	}
	key := c.GetKey()
	if key == "" {
		p.addf(path+".key", "must be set")
		return
	}
	if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
		p.addf(path, "at least one of values and notValues must be set for key %s", quote(key))
	}
	a, msg := lookupAttribute(key)
	if msg != "" {
		p.addf(path+".key", "%s", msg)
		return
	}
	if custom && a.noCustom {
		p.addf(path+".key", "%s cannot be used with action CUSTOM", quote(key))
	}
	for _, l := range []struct {
		name   string
		values []string
	}{{"values", c.GetValues()}, {"notValues", c.GetNotValues()}} {
		for i, v := range l.values {
			if v == "" {
				p.addf(at(path+"."+l.name, i), "must not be empty")
			} else if msg := a.check(v); msg != "" {
				p.addf(at(path+"."+l.name, i), "%s", msg)
			}
		}
	}
}
