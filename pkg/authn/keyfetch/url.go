package keyfetch

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLLength bounds every URL key material is fetched from, configured or
// discovered.
const MaxURLLength = 2048

var (
	// ErrRefusedURL: a URL is not one key material may be fetched from.
	ErrRefusedURL = errors.New("refused url")
	// ErrLoopbackHTTP: a URL is plain http to a loopback host, which the
	// rule in force does not allow: a RequestAuthentication's, unless
	// istiod's operator allows it. It wraps ErrRefusedURL.
	ErrLoopbackHTTP = fmt.Errorf("http to a loopback host is not allowed by this istiod (--allow-loopback-http-jwks): %w", ErrRefusedURL)
)

// URLRule is which URLs key material may be fetched from: absolute https
// URLs, and plain http to loopback hosts where LoopbackHTTP says so, of at
// most MaxURLLength bytes, without user info, query or fragment, with a
// port, if any, in 1–65535. It applies to every URL fetched, the first and
// those a discovery document names.
//
// Errors do not quote the URL: a discovered URL is fetched content, and
// callers add it only where it is their own configuration.
type URLRule struct {
	// LoopbackHTTP allows plain http to localhost and loopback addresses:
	// istiod's own loopback-only ports among them. The operator's issuer
	// (--jwt-rule) has it; the URLs that RequestAuthentication authors
	// name have it only when the operator allows it.
	LoopbackHTTP bool
}

// Check returns nil when raw may be fetched, and an error wrapping
// ErrRefusedURL (ErrLoopbackHTTP for plain http to a loopback host the
// rule does not allow) when not.
func (r URLRule) Check(raw string) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("%d bytes, limit %d: %w", len(raw), MaxURLLength, ErrRefusedURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", ErrRefusedURL)
	}
	if u.Host == "" || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, "#?\\") {
		return fmt.Errorf("must be scheme://host[:port][/path] only: %w", ErrRefusedURL)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("port is not 1-65535: %w", ErrRefusedURL)
		}
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		switch loopback := isLoopbackHost(u.Hostname()); {
		case loopback && r.LoopbackHTTP:
			return nil
		case loopback:
			return ErrLoopbackHTTP
		case r.LoopbackHTTP:
			return fmt.Errorf("http is allowed only for loopback hosts: %w", ErrRefusedURL)
		}
		return fmt.Errorf("scheme is not https: %w", ErrRefusedURL)
	default:
		return fmt.Errorf("scheme is not https: %w", ErrRefusedURL)
	}
}

// CheckURL is the rule for the URLs istiod's operator configures
// (--jwt-rule) and those their discovery documents name: URLRule with
// LoopbackHTTP.
func CheckURL(raw string) error {
	return URLRule{LoopbackHTTP: true}.Check(raw)
}

// isLoopbackHost says whether host is localhost or a loopback address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
