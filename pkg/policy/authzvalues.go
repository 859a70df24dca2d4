package policy

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The values an AuthorizationPolicy's rules match, field by field and
// `when` key by key. Each value has two rules: what cannot be applied as
// written (Istio's validation, and what Envoy's matchers cannot take),
// which the webhook refuses and the generators fail closed on
// (CheckRuleValue, CheckConditionKey); and, at admission only, the
// stricter forms the webhook asks for (the package's deliberate
// differences), which the generators translate as Istio does.

// ruleValue is the rule of one field of a Source or Operation, or of one
// `when` key.
type ruleValue struct {
	// check is why a value cannot be applied, "" when it can.
	check func(string) string
	// strict is, at admission only, why a value the generators would
	// apply is refused anyway; nil when admission asks no more.
	strict func(string) string
	// noCustom marks what a CUSTOM policy cannot match on.
	noCustom bool
	// maxValues bounds the values of one field (0: no bound).
	maxValues int
}

// maxServiceAccounts is Istio's bound on service accounts per field.
const maxServiceAccounts = 16

var (
	principalValue      = ruleValue{check: nonEmpty, strict: checkPrincipal, noCustom: true}
	requestValue        = ruleValue{check: nonEmpty, noCustom: true}
	namespaceValue      = ruleValue{check: nonEmpty, strict: checkNamespace, noCustom: true}
	serviceAccountValue = ruleValue{check: checkServiceAccount, maxValues: maxServiceAccounts}
	ipValue             = ruleValue{check: checkIPBlock}
	trustDomainValue    = ruleValue{check: checkTrustDomain}
	portValue           = ruleValue{check: nonEmpty, strict: checkPortString}
	anyValue            = ruleValue{check: nonEmpty}
)

// fieldValues are the fields of a Source and an Operation; a not-field
// ("notPrincipals") has its field's rule.
var fieldValues = map[string]ruleValue{
	"principals":        principalValue,
	"requestPrincipals": requestValue,
	"namespaces":        namespaceValue,
	"serviceAccounts":   serviceAccountValue,
	"ipBlocks":          ipValue,
	"remoteIpBlocks":    ipValue,
	"trustDomains":      trustDomainValue,
	"hosts":             anyValue,
	"ports":             ruleValue{check: checkPortValue, strict: checkPortString},
	"methods":           ruleValue{check: nonEmpty, strict: checkMethod},
	"paths":             ruleValue{check: checkPath},
}

// conditionValues are Istio's `when` keys; those of mapConditions are
// written key[name] and their names checked by nameCheck.
var (
	conditionValues = map[string]ruleValue{
		"source.ip":              ipValue,
		"remote.ip":              ipValue,
		"destination.ip":         ipValue,
		"destination.port":       ruleValue{check: checkPortValue, strict: checkPortString},
		"source.namespace":       {check: nonEmpty, noCustom: true},
		"source.principal":       principalValue,
		"source.serviceAccount":  serviceAccountValue,
		"source.trustDomain":     trustDomainValue,
		"request.auth.principal": requestValue,
		"request.auth.audiences": requestValue,
		"request.auth.presenter": requestValue,
		"connection.sni":         anyValue,
	}
	mapConditions = []struct {
		prefix    string
		value     ruleValue
		checkName func(key, names string) string
	}{
		{"request.headers", anyValue, checkHeaderKeyName},
		{"request.auth.claims", requestValue, checkClaimNames},
		{envoyFilterPrefix, anyValue, checkMetadataKeyName},
	}
	// replacedConditions were accepted by older APIs and are refused with
	// the reason.
	replacedConditions = map[string]string{
		"destination.namespace": "is replaced by the policy's namespace",
		"destination.labels":    "is replaced by the workload selector",
		"destination.name":      "is only supported by the removed v1alpha1 API",
		"destination.user":      "is only supported by the removed v1alpha1 API",
	}
)

const envoyFilterPrefix = "experimental.envoy.filters."

// MaxClaimDepth bounds the nesting of request.auth.claims[a][b]....
const MaxClaimDepth = 16

// fieldValue is the rule of a Source or Operation field, with or without
// its "not".
func fieldValue(field string) (ruleValue, bool) {
	if rest, ok := strings.CutPrefix(field, "not"); ok && rest != "" {
		field = strings.ToLower(rest[:1]) + rest[1:]
	}
	v, ok := fieldValues[field]
	return v, ok
}

// conditionValue returns the rule of a `when` key, or why the key is
// refused.
func conditionValue(key string) (ruleValue, string) {
	if v, ok := conditionValues[key]; ok {
		return v, ""
	}
	for _, m := range mapConditions {
		names, ok := strings.CutPrefix(key, m.prefix)
		if !ok {
			continue
		}
		if msg := m.checkName(key, names); msg != "" {
			return ruleValue{}, msg
		}
		return m.value, ""
	}
	name, _, _ := strings.Cut(key, "[")
	if msg, ok := replacedConditions[name]; ok {
		return ruleValue{}, quote(key) + " " + msg
	}
	return ruleValue{}, quote(key) + " is not a supported attribute"
}

// CheckConditionKey returns why an AuthorizationPolicy may not test the
// `when` key, "" when it is one of Istio's attributes in a form the
// generators can translate.
func CheckConditionKey(key string) string {
	_, msg := conditionValue(key)
	return msg
}

// CheckRuleValue returns why v cannot be applied as a value of a Source
// or Operation field ("principals", "notPaths", ...) or, with condition,
// of the `when` key field: the generators fail closed on it, the webhook
// refuses it. "" when it can be applied.
func CheckRuleValue(field string, condition bool, v string) string {
	var r ruleValue
	var ok bool
	if condition {
		var msg string
		if r, msg = conditionValue(field); msg != "" {
			return msg
		}
		ok = true
	} else {
		r, ok = fieldValue(field)
	}
	if !ok {
		return quote(field) + " is not a field of a rule"
	}
	return r.check(v)
}

// CheckRuleValues returns why the values of a field or a `when` key
// cannot be applied together (too many), "" when they can.
func CheckRuleValues(field string, condition bool, values []string) string {
	var r ruleValue
	if condition {
		r, _ = conditionValue(field)
	} else {
		r, _ = fieldValue(field)
	}
	if r.maxValues > 0 && len(values) > r.maxValues {
		return "may hold at most " + strconv.Itoa(r.maxValues) + " values"
	}
	return ""
}

// admissionCheck is the webhook's check of a value under r: what cannot
// be applied, then what admission asks more.
func (r ruleValue) admissionCheck(v string) string {
	if msg := r.check(v); msg != "" {
		return msg
	}
	if r.strict != nil {
		return r.strict(v)
	}
	return ""
}

func nonEmpty(s string) string {
	if s == "" {
		return "must not be empty"
	}
	return ""
}

// checkIPBlock checks an IP address or CIDR range, without a zone.
func checkIPBlock(s string) string {
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			return quote(s) + " is not a CIDR range"
		}
		return ""
	}
	if a, err := netip.ParseAddr(s); err != nil || a.Zone() != "" {
		return quote(s) + " is not an IP address"
	}
	return ""
}

// checkPortValue is a port Envoy can match: a number in 0-65535 (0
// matches nothing; admission refuses it).
func checkPortValue(s string) string {
	if _, err := strconv.ParseUint(s, 10, 16); err != nil {
		return "port " + quote(s) + " is not a number in 0-65535"
	}
	return ""
}

// checkPortString checks a decimal port number in 1-65535.
func checkPortString(s string) string {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return "port " + quote(s) + " is not a number in 1-65535"
	}
	return ""
}

// checkServiceAccount accepts "name" or "namespace/name", without
// wildcards, as Istio does.
func checkServiceAccount(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 320 {
		return "is longer than 320 characters"
	}
	if strings.Contains(s, "*") {
		return quote(s) + ": wildcards are not allowed"
	}
	ns, sa, hasNS := strings.Cut(s, "/")
	if !hasNS {
		ns, sa = "", s
	}
	if strings.Contains(sa, "/") || (hasNS && ns == "") || sa == "" {
		return quote(s) + " is not a service account or namespace/service-account"
	}
	return ""
}

// checkTrustDomain is Istio's rule for trust domains: a name with at most
// one "*", at its start or end, and no "/".
func checkTrustDomain(s string) string {
	n := strings.Count(s, "*")
	switch {
	case s == "":
		return "must not be empty"
	case strings.Contains(s, "/"):
		return "trust domain " + quote(s) + " has a /"
	case n > 1 || (n == 1 && s != "*" && !strings.HasPrefix(s, "*") && !strings.HasSuffix(s, "*")):
		return "trust domain " + quote(s) + " has a wildcard other than at its start or end"
	}
	return ""
}

// checkHeaderKeyName checks NAME of request.headers[NAME].
func checkHeaderKeyName(key, names string) string {
	if len(names) < 3 || names[0] != '[' || names[len(names)-1] != ']' {
		return quote(key) + " must have the form request.headers[<name>]"
	}
	if strings.ContainsAny(names, "\x00\r\n") {
		return quote(key) + " names a header with a control character"
	}
	return ""
}

// checkClaimNames checks [a][b]... of request.auth.claims[a][b]...: each
// name taken as written, dots included, neither empty nor holding a
// bracket, at most MaxClaimDepth deep.
func checkClaimNames(key, names string) string {
	if len(names) < 2 || names[0] != '[' || names[len(names)-1] != ']' {
		return quote(key) + " must have the form request.auth.claims[<name>]..."
	}
	parts := strings.Split(names[1:len(names)-1], "][")
	if len(parts) > MaxClaimDepth {
		return quote(key) + " nests more than " + strconv.Itoa(MaxClaimDepth) + " claims"
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "[]") {
			return quote(key) + ": a claim name is empty or holds a bracket"
		}
	}
	return ""
}

// checkMetadataKeyName checks <filter>[<key>] of
// experimental.envoy.filters.<filter>[<key>].
func checkMetadataKeyName(key, names string) string {
	open := strings.Index(names, "[")
	if open <= 0 || !strings.HasSuffix(names, "]") || open >= len(names)-2 {
		return quote(key) + " must have the form experimental.envoy.filters.<filter>[<key>]"
	}
	return ""
}

var trustDomainRE = regexp.MustCompile(`^[a-z0-9._-]+$`)

// principalSegments is the shape of a principal:
// <trust-domain>/ns/<namespace>/sa/<service-account>.
const principalSegments = 5

// checkPrincipal accepts "*", a full principal, or one with a "*" in place
// of whole leading segments ("*/ns/foo/sa/bar") or whole trailing segments
// ("cluster.local/ns/foo/*").
func checkPrincipal(s string) string {
	if s == "*" {
		return ""
	}
	const form = " is not <trust-domain>/ns/<namespace>/sa/<service-account>, with * only in place of whole leading or trailing segments"
	lead, trail := strings.HasPrefix(s, "*"), strings.HasSuffix(s, "*")
	body := s
	switch {
	case lead && trail:
		return quote(s) + form
	case lead:
		rest, ok := strings.CutPrefix(s[1:], "/")
		if !ok {
			return quote(s) + form
		}
		body = rest
	case trail:
		rest, ok := strings.CutSuffix(s[:len(s)-1], "/")
		if !ok {
			return quote(s) + form
		}
		body = rest
	}
	if strings.Contains(body, "*") {
		return quote(s) + form
	}
	segs := strings.Split(body, "/")
	wild := lead || trail
	if (!wild && len(segs) != principalSegments) || (wild && len(segs) >= principalSegments) {
		return quote(s) + form
	}
	offset := 0
	if lead {
		offset = principalSegments - len(segs)
	}
	for i, seg := range segs {
		if !principalSegmentOK(offset+i, seg) {
			return quote(s) + form
		}
	}
	return ""
}

func principalSegmentOK(pos int, seg string) bool {
	switch pos {
	case 0:
		return len(seg) <= 255 && trustDomainRE.MatchString(seg)
	case 1:
		return seg == "ns"
	case 2:
		return len(validation.IsDNS1123Label(seg)) == 0
	case 3:
		return seg == "sa"
	default:
		return len(validation.IsDNS1123Subdomain(seg)) == 0
	}
}

// checkNamespace accepts a namespace name, "*", or a name with a leading
// or trailing "*".
func checkNamespace(s string) string {
	if s == "*" {
		return ""
	}
	name := strings.TrimSuffix(strings.TrimPrefix(s, "*"), "*")
	if len(name) == len(s) {
		if len(validation.IsDNS1123Label(s)) > 0 {
			return quote(s) + " is not a namespace name"
		}
		return ""
	}
	if name == "" || strings.Contains(name, "*") || !dnsLabelCharsRE.MatchString(name) {
		return quote(s) + " is not a namespace name with a leading or trailing *"
	}
	return ""
}

var dnsLabelCharsRE = regexp.MustCompile(`^[a-z0-9-]+$`)

var methodRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// checkMethod accepts an HTTP method token.
func checkMethod(s string) string {
	if !methodRE.MatchString(s) {
		return quote(s) + " is not an HTTP method"
	}
	return ""
}

// Path templates, as Istio writes them and Envoy's uri_template matcher
// takes them: "{*}" is one segment, "{**}" any number of them.
const (
	matchOne = "{*}"
	matchAny = "{**}"
	// templateLiteral are the characters Envoy allows in a template
	// literal (Istio also allows "=", which Envoy refuses).
	templateLiteral = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%!$&'()+,;:@"
	// maxTemplate bounds Envoy's form of a template.
	maxTemplate = 256
)

// checkPath accepts any non-empty path without braces, and a template
// that starts with "/", whose segments are each "{*}", "{**}" or a
// literal of templateLiteral, no operator after "{**}", of at most
// maxTemplate bytes in Envoy's form.
func checkPath(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if !IsPathTemplate(s) {
		if strings.ContainsAny(s, "{}") {
			return quote(s) + ": { and } may only appear as {*} or {**}"
		}
		return ""
	}
	if !strings.HasPrefix(s, "/") {
		return quote(s) + ": a path template must start with /"
	}
	sawAny := false
	size := len(s)
	for seg := range strings.SplitSeq(strings.TrimSuffix(s[1:], "/"), "/") {
		switch {
		case seg == matchOne || seg == matchAny:
			if sawAny {
				return quote(s) + ": {**} must be the last template operator"
			}
			sawAny = seg == matchAny
			size -= 2 // Envoy's form drops the braces
		case strings.ContainsAny(seg, "{}"):
			return quote(s) + ": { and } may only appear as {*} or {**}"
		case seg == "" || strings.Trim(seg, templateLiteral) != "":
			return quote(s) + ": segment " + quote(seg) + " is not a valid path literal"
		}
	}
	if size > maxTemplate {
		return quote(s) + " is longer than " + strconv.Itoa(maxTemplate) + " bytes as a template"
	}
	return ""
}

// IsPathTemplate reports whether a path uses Istio's template operators.
func IsPathTemplate(s string) bool {
	return strings.Contains(s, matchOne) || strings.Contains(s, matchAny)
}
