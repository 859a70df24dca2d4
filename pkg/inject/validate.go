package inject

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Every value that reaches the injected pod passes one of these small
// validators: each checks one thing and says why it refused.

const maxValueLen = 1024

var (
	// A container image reference: [registry[:port]/]path[:tag][@digest].
	imageRE = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\.[a-z0-9-]+)*(?::[0-9]{1,5})?` +
		`(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+` +
		`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
		`(?:@sha256:[a-f0-9]{64})?$`)
	tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	// Envoy component log levels: "misc:error,upstream:debug".
	componentLevelRE = regexp.MustCompile(`^[a-z_]+:(trace|debug|info|warning|warn|error|critical|off|none)$`)
	trustDomainRE    = regexp.MustCompile(`^[a-z0-9._-]{1,255}$`)
)

var logLevels = map[string]bool{
	"trace": true, "debug": true, "info": true, "warning": true,
	"error": true, "critical": true, "off": true,
}

func validateImage(s string) error {
	if len(s) > 512 || !imageRE.MatchString(s) {
		return fmt.Errorf("%.80q is not an image reference", s)
	}
	return nil
}

func validateTag(s string) error {
	if s == "" {
		return nil
	}
	if !tagRE.MatchString(s) {
		return fmt.Errorf("%.80q is not an image tag", s)
	}
	return nil
}

func validatePullPolicy(s string) error {
	switch corev1.PullPolicy(s) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return nil
	}
	return fmt.Errorf("%.40q is not a pull policy", s)
}

func validateOneOf(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return fmt.Errorf("%.40q is not one of %v", s, allowed)
}

func validateDNSLabel(s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return fmt.Errorf("%.80q: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

func validateDNSName(s string) error {
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return fmt.Errorf("%.80q: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

func validateRevision(s string) error {
	if s == "" {
		return nil
	}
	return validateDNSLabel(s)
}

func validateLabelValue(s string) error {
	if errs := validation.IsValidLabelValue(s); len(errs) > 0 {
		return fmt.Errorf("%.80q: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

func validateTrustDomain(s string) error {
	if s == "" || trustDomainRE.MatchString(s) {
		return nil
	}
	return fmt.Errorf("%.80q is not a trust domain", s)
}

func validateAudience(s string) error {
	if s == "" || len(s) > 253 || strings.ContainsAny(s, " \t\r\n\"'") {
		return fmt.Errorf("%.80q is not a token audience", s)
	}
	return nil
}

func validateHostPort(s string, allowEmpty bool) error {
	if s == "" && allowEmpty {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%.80q is not host:port: %w", s, err)
	}
	if _, perr := netip.ParseAddr(host); perr != nil {
		if err := validateDNSName(host); err != nil {
			return err
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("port %.10q: %w", port, err)
	}
	return validatePortNumber(int32(n))
}

func validatePortNumber(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d is outside 1-65535", p)
	}
	return nil
}

func validateLogLevel(s string) error {
	if !logLevels[s] {
		return fmt.Errorf("%.40q is not one of trace, debug, info, warning, error, critical, off", s)
	}
	return nil
}

func validateComponentLevels(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > maxValueLen {
		return errors.New("too long")
	}
	for _, part := range strings.Split(s, ",") {
		if !componentLevelRE.MatchString(part) {
			return fmt.Errorf("%.40q is not component:level", part)
		}
	}
	return nil
}

// normalizeCIDRs checks a comma list of CIDRs (or "*" when star is allowed)
// and returns it re-joined without spaces. An empty list is allowed.
func normalizeCIDRs(s string, star bool) (string, error) {
	if len(s) > 16*maxValueLen {
		return "", errors.New("too long")
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if s == "*" {
		if !star {
			return "", errors.New(`"*" is not allowed here`)
		}
		return s, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return "", fmt.Errorf("%.60q is not a CIDR", p)
		}
		out = append(out, pfx.String())
	}
	return strings.Join(out, ","), nil
}

// normalizePorts checks a comma list of ports 1-65535 (or "*" when star is
// allowed) and returns it re-joined without spaces.
func normalizePorts(s string, star bool) (string, error) {
	if len(s) > 8*maxValueLen {
		return "", errors.New("too long")
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if s == "*" {
		if !star {
			return "", errors.New(`"*" is not allowed here`)
		}
		return s, nil
	}
	ports, err := parsePortList(s)
	if err != nil {
		return "", err
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = strconv.Itoa(int(p))
	}
	return strings.Join(out, ","), nil
}

func parsePortList(s string) ([]int32, error) {
	var out []int32
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%.20q is not a port 1-65535", p)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// parseQuantity accepts a positive resource quantity such as 100m or 1Gi.
func parseQuantity(s string) (resource.Quantity, error) {
	if len(s) > 64 {
		return resource.Quantity{}, errors.New("too long")
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%.40q is not a quantity: %w", s, err)
	}
	if q.Sign() <= 0 {
		return resource.Quantity{}, fmt.Errorf("%.40q must be positive", s)
	}
	return q, nil
}

func validateResources(r corev1.ResourceRequirements) error {
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name := range l {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory && name != corev1.ResourceEphemeralStorage {
				return fmt.Errorf("resource %.40q is not supported", name)
			}
		}
	}
	return checkRequestsWithinLimits(r)
}

func checkRequestsWithinLimits(r corev1.ResourceRequirements) error {
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("%s request %s exceeds limit %s", name, req.String(), lim.String())
		}
	}
	return nil
}
