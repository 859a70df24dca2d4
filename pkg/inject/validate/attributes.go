package validate

import (
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// attribute is a `when` key an AuthorizationPolicy may use.
type attribute struct {
	check func(string) string
	// noCustom marks keys a CUSTOM policy cannot match on.
	noCustom bool
}

var anyValue = attribute{check: func(string) string { return "" }}

// exactAttributes and mapAttributes are Istio's supported `when` keys; a
// map attribute is written prefix[name].
var (
	exactAttributes = map[string]attribute{
		"source.ip":              {check: checkIPBlock},
		"remote.ip":              {check: checkIPBlock},
		"destination.ip":         {check: checkIPBlock},
		"destination.port":       {check: checkPortString},
		"source.namespace":       {check: nonEmpty, noCustom: true},
		"source.principal":       {check: checkPrincipal, noCustom: true},
		"source.serviceAccount":  {check: checkServiceAccount},
		"request.auth.principal": {check: nonEmpty, noCustom: true},
		"request.auth.audiences": {check: nonEmpty, noCustom: true},
		"request.auth.presenter": {check: nonEmpty, noCustom: true},
		"connection.sni":         anyValue,
	}
	mapAttributes = map[string]attribute{
		"request.headers":                     anyValue,
		"request.experimental.inline.headers": anyValue,
		"request.auth.claims":                 {check: nonEmpty, noCustom: true},
	}
	// replacedAttributes were accepted by older APIs and are refused with
	// the reason.
	replacedAttributes = map[string]string{
		"destination.namespace": "is replaced by the policy's namespace",
		"destination.labels":    "is replaced by the workload selector",
		"destination.name":      "is only supported by the removed v1alpha1 API",
		"destination.user":      "is only supported by the removed v1alpha1 API",
	}
)

const envoyFilterPrefix = "experimental.envoy.filters."

// lookupAttribute returns the attribute for key, or why key is refused.
func lookupAttribute(key string) (attribute, string) {
	if a, ok := exactAttributes[key]; ok {
		return a, ""
	}
	name, _, isMap := strings.Cut(key, "[")
	if isMap {
		if msg, ok := replacedAttributes[name]; ok {
			return attribute{}, quote(key) + " " + msg
		}
	}
	if a, ok := mapAttributes[name]; ok || strings.HasPrefix(key, envoyFilterPrefix) {
		if !ok {
			a = anyValue
		}
		open := strings.Index(key, "[")
		if open <= 0 || !strings.HasSuffix(key, "]") || open >= len(key)-2 {
			return attribute{}, quote(key) + " must have the form name[key]"
		}
		return a, ""
	}
	if msg, ok := replacedAttributes[key]; ok {
		return attribute{}, quote(key) + " " + msg
	}
	return attribute{}, quote(key) + " is not a supported attribute"
}

func nonEmpty(s string) string {
	if s == "" {
		return "must not be empty"
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
	if s == "" {
		return "must not be empty"
	}
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
	if s == "" {
		return "must not be empty"
	}
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

var methodRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// checkMethod accepts an HTTP method token.
func checkMethod(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if !methodRE.MatchString(s) {
		return quote(s) + " is not an HTTP method"
	}
	return ""
}

// pcharRE is a path segment of RFC 3986 pchar characters.
var pcharRE = regexp.MustCompile(`^[a-zA-Z0-9-._~%!$&'()+,;:@=]+$`)

// checkPath accepts any non-empty path; one with a {*} or {**} template
// must use them as whole segments, {**} last, and plain literals otherwise.
func checkPath(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if !strings.Contains(s, "{*}") && !strings.Contains(s, "{**}") {
		return ""
	}
	sawAny := false
	for seg := range strings.SplitSeq(strings.Trim(s, "/"), "/") {
		switch {
		case (seg == "{*}" || seg == "{**}") && sawAny:
			return quote(s) + ": {**} must be the last template operator"
		case seg == "{*}":
		case seg == "{**}":
			sawAny = true
		case strings.ContainsAny(seg, "{}"):
			return quote(s) + ": { and } may only appear as {*} or {**}"
		case !pcharRE.MatchString(seg):
			return quote(s) + ": segment " + quote(seg) + " is not a valid path literal"
		}
	}
	return ""
}
