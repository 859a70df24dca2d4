package policy

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// Checks of names, hosts and values as Istio's validation makes them. Each
// returns "" when the value is fine and otherwise the reason, without the
// field path.

var (
	// dnsLabelRE is a DNS label as Istio reads one: letters of either case.
	dnsLabelRE = regexp.MustCompile(`^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	// wildcardLabelRE also takes "*", and a label led by "*" or "*-".
	wildcardLabelRE = regexp.MustCompile(`^(?:\*|(?:\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)$`)
	// labelKeyRE and labelValueRE are Kubernetes label keys and values as
	// Istio checks them in routes' sourceLabels.
	labelKeyRE   = regexp.MustCompile(`^([a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)
	labelValueRE = regexp.MustCompile(`^((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	// headerNameRE is an HTTP token (RFC 7230).
	headerNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~A-Za-z0-9]+$")
	// headerValueRE refuses control characters but tab.
	headerValueRE = regexp.MustCompile("^[^\u0000-\u0008\u000A-\u001F\u007F]*$")
)

func isDNSLabel(s string) bool { return len(s) <= 63 && dnsLabelRE.MatchString(s) }

// checkDNSName checks a domain name of DNS labels, with an optional
// trailing dot and a top-level domain not all digits.
func checkDNSName(name string) string {
	if msg := checkNameLength(name); msg != "" {
		return msg
	}
	return checkDNSLabels(name)
}

func checkNameLength(name string) string {
	switch {
	case name == "":
		return "empty domain name"
	case len(name) > 255:
		return "domain name " + quote(name) + " is longer than 255 characters"
	}
	return ""
}

func checkDNSLabels(name string) string {
	labels := strings.Split(name, ".")
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return "domain name " + quote(name) + " has an all-numeric top-level domain"
	}
	for i, l := range labels {
		if i == len(labels)-1 && l == "" && i > 0 {
			break // a trailing dot
		}
		if !isDNSLabel(l) {
			return "domain name " + quote(name) + " has an invalid label " + quote(l)
		}
	}
	return ""
}

// checkWildcardName checks a domain name whose first label may be a
// wildcard ("*", "*foo", "*-foo").
func checkWildcardName(name string) string {
	if msg := checkNameLength(name); msg != "" {
		return msg
	}
	first, rest, more := strings.Cut(name, ".")
	if len(first) > 63 || !wildcardLabelRE.MatchString(first) {
		return "domain name " + quote(name) + " has an invalid label " + quote(first)
	}
	if more {
		return checkDNSLabels(rest)
	}
	return ""
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// checkIPOrCIDR checks an address or an address range.
func checkIPOrCIDR(s string) string {
	if strings.Count(s, "/") == 1 {
		if _, err := netip.ParsePrefix(s); err != nil {
			return quote(s) + " is not a CIDR block"
		}
		return ""
	}
	if !isIP(s) {
		return quote(s) + " is not an IP address"
	}
	return ""
}

func checkPort(n int64) string {
	if n < 1 || n > 65535 {
		return "port " + strconv.FormatInt(n, 10) + " is not in 1-65535"
	}
	return ""
}

// checkDuration checks a duration of at least 1ms in whole milliseconds.
func checkDuration(d *durationpb.Duration) string {
	if err := d.CheckValid(); err != nil {
		return "invalid duration"
	}
	v := d.AsDuration()
	switch {
	case v < time.Millisecond:
		return "duration must be at least 1ms"
	case v%time.Millisecond != 0:
		return "duration must be in whole milliseconds"
	}
	return ""
}

func checkLabels(f *Findings, path string, labels map[string]string) {
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) || labelKeyPartsTooLong(k) {
			f.errorf(path, "invalid label key %s", quote(k))
		}
		if !labelValueRE.MatchString(v) {
			f.errorf(key(path, k), "invalid label value %s", quote(v))
		}
	}
}

func labelKeyPartsTooLong(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		return len(k) > 63
	}
	return len(prefix) > 253 || len(name) > 63
}

// checkPartialWildcard refuses a "*" anywhere but as the whole host or
// its leading "*." label.
func checkPartialWildcard(h string) string {
	if strings.Contains(h, "*") && h != "*" && !strings.HasPrefix(h, "*.") {
		return "partial wildcard " + quote(h) + " is not allowed"
	}
	return ""
}
