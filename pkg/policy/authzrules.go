package policy

import (
	"bytes"
	"encoding/json"
	"strconv"

	security "istio.io/api/security/v1beta1"
)

// dryRunAnnotation marks an AuthorizationPolicy as evaluated but not
// enforced.
const dryRunAnnotation = "istio.io/dry-run"

// ValidateAuthorizationPolicy checks an AuthorizationPolicy as the
// validating webhook does; raw is its spec's JSON (nil when there is
// none), for the empty lists protobuf cannot tell from absent ones. The
// values its rules match follow CheckRuleValue and CheckConditionKey,
// which the generators follow too, and at admission the stricter forms
// the package documents.
func ValidateAuthorizationPolicy(annotations map[string]string, ap *security.AuthorizationPolicy, raw []byte) Findings {
	var f Findings
	checkDryRun(&f, annotations, ap)
	checkEmptyRuleLists(&f, raw)
	checkTargets(&f, ap.GetSelector(), ap.GetTargetRef(), ap.GetTargetRefs())
	action := ap.GetAction()
	if _, ok := security.AuthorizationPolicy_Action_name[int32(action)]; !ok {
		f.errorf("spec.action", "%d is not one of ALLOW, DENY, AUDIT, CUSTOM", int32(action))
	}
	custom := action == security.AuthorizationPolicy_CUSTOM
	switch {
	case custom && ap.GetProvider().GetName() == "":
		f.errorf("spec.provider.name", "must be set for action CUSTOM")
	case !custom && ap.GetProvider() != nil:
		f.errorf("spec.provider", "may only be set with action CUSTOM, not %s", action)
	}
	if ap.GetRules() == nil && (custom || action == security.AuthorizationPolicy_DENY) {
		f.errorf("spec.rules", "a %s policy without rules never applies; add an empty rule {} to match every request", action)
	}
	for i, r := range ap.GetRules() {
		checkRule(&f, at("spec.rules", i), r, custom)
	}
	return f
}

func checkDryRun(f *Findings, annotations map[string]string, ap *security.AuthorizationPolicy) {
	v, ok := annotations[dryRunAnnotation]
	if !ok {
		return
	}
	path := "metadata.annotations[" + dryRunAnnotation + "]"
	switch ap.GetAction() {
	case security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY:
	default:
		f.errorf(path, "only ALLOW and DENY policies can be dry-run")
		return
	}
	if _, err := strconv.ParseBool(v); err != nil {
		f.errorf(path, "%s is not a boolean", quote(v))
	}
}

// checkEmptyRuleLists refuses `from: []` and `to: []`, which decode to the
// same message as an absent list but say something else: Istio refuses
// them rather than guess.
func checkEmptyRuleLists(f *Findings, raw []byte) {
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
		for _, name := range []string{"from", "to"} {
			if v, ok := r[name]; ok && isEmptyList(v) {
				f.errorf(at("spec.rules", i)+"."+name, "must not be an empty list: omit it to match any")
			}
		}
	}
}

func isEmptyList(v json.RawMessage) bool {
	var l []json.RawMessage
	return bytes.HasPrefix(bytes.TrimSpace(v), []byte("[")) && json.Unmarshal(v, &l) == nil && len(l) == 0
}

func checkRule(f *Findings, path string, r *security.Rule, custom bool) {
	if r == nil {
		f.errorf(path, "must not be null")
		return
	}
	for i, from := range r.GetFrom() {
		fp := at(path+".from", i)
		switch {
		case from == nil:
			f.errorf(fp, "must not be null")
		case from.GetSource() == nil:
			f.errorf(fp+".source", "must be set")
		default:
			checkSource(f, fp+".source", from.GetSource(), custom)
		}
	}
	for i, t := range r.GetTo() {
		tp := at(path+".to", i)
		switch {
		case t == nil:
			f.errorf(tp, "must not be null")
		case t.GetOperation() == nil:
			f.errorf(tp+".operation", "must be set")
		default:
			checkOperation(f, tp+".operation", t.GetOperation())
		}
	}
	for i, c := range r.GetWhen() {
		checkCondition(f, at(path+".when", i), c, custom)
	}
}

// stringList is one repeated field of a Source or Operation.
type stringList struct {
	name   string
	values []string
}

func checkSource(f *Findings, path string, s *security.Source, custom bool) {
	checkLists(f, path, []stringList{
		{"principals", s.GetPrincipals()},
		{"notPrincipals", s.GetNotPrincipals()},
		{"requestPrincipals", s.GetRequestPrincipals()},
		{"notRequestPrincipals", s.GetNotRequestPrincipals()},
		{"namespaces", s.GetNamespaces()},
		{"notNamespaces", s.GetNotNamespaces()},
		{"serviceAccounts", s.GetServiceAccounts()},
		{"notServiceAccounts", s.GetNotServiceAccounts()},
		{"ipBlocks", s.GetIpBlocks()},
		{"notIpBlocks", s.GetNotIpBlocks()},
		{"remoteIpBlocks", s.GetRemoteIpBlocks()},
		{"notRemoteIpBlocks", s.GetNotRemoteIpBlocks()},
		{"trustDomains", s.GetTrustDomains()},
		{"notTrustDomains", s.GetNotTrustDomains()},
	}, custom)
}

func checkOperation(f *Findings, path string, o *security.Operation) {
	checkLists(f, path, []stringList{
		{"hosts", o.GetHosts()},
		{"notHosts", o.GetNotHosts()},
		{"ports", o.GetPorts()},
		{"notPorts", o.GetNotPorts()},
		{"methods", o.GetMethods()},
		{"notMethods", o.GetNotMethods()},
		{"paths", o.GetPaths()},
		{"notPaths", o.GetNotPaths()},
	}, false)
}

// checkLists checks every value of every list, and refuses a source or
// operation in which all lists are empty.
func checkLists(f *Findings, path string, lists []stringList, custom bool) {
	empty := true
	for _, l := range lists {
		if len(l.values) == 0 {
			continue
		}
		empty = false
		r, _ := fieldValue(l.name)
		if custom && r.noCustom {
			f.errorf(path+"."+l.name, "cannot be used with action CUSTOM")
		}
		f.check(path+"."+l.name, CheckRuleValues(l.name, false, l.values))
		for i, v := range l.values {
			f.check(at(path+"."+l.name, i), r.admissionCheck(v))
		}
	}
	if empty {
		f.errorf(path, "must not be empty: set at least one field")
	}
}

func checkCondition(f *Findings, path string, c *security.Condition, custom bool) {
	if c == nil {
		f.errorf(path, "must not be null")
		return
	}
	k := c.GetKey()
	if k == "" {
		f.errorf(path+".key", "must be set")
		return
	}
	if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
		f.errorf(path, "at least one of values and notValues must be set for key %s", quote(k))
	}
	r, msg := conditionValue(k)
	if msg != "" {
		f.errorf(path+".key", "%s", msg)
		return
	}
	if custom && r.noCustom {
		f.errorf(path+".key", "%s cannot be used with action CUSTOM", quote(k))
	}
	for _, l := range []stringList{{"values", c.GetValues()}, {"notValues", c.GetNotValues()}} {
		f.check(path+"."+l.name, CheckRuleValues(k, true, l.values))
		for i, v := range l.values {
			f.check(at(path+"."+l.name, i), r.admissionCheck(v))
		}
	}
}
