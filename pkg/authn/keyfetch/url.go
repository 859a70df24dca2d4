package keyfetch

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// MaxURLLength bounds every URL key material is fetched from, configured or
// discovered.
const MaxURLLength = 2048

// ErrRefusedURL: a URL is not one key material may be fetched from.
var ErrRefusedURL = errors.New("refused url")

// CheckURL is the one rule for every URL key material is fetched from,
// whether an operator configured it or a discovery document named it: an
// absolute https URL, or http to a loopback host, of at most MaxURLLength
// bytes, without user info, query or fragment.
//
// The error does not quote raw: a discovered URL is fetched content, and
// callers add it only where it is their own configuration.
func CheckURL(raw string) error {
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
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopbackHost(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("http is allowed only for loopback hosts: %w", ErrRefusedURL)
	default:
		return fmt.Errorf("scheme is not https: %w", ErrRefusedURL)
	}
}

// isLoopbackHost says whether host is localhost or a loopback address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
