package keyfetch

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	tests := map[string]struct {
		url  string
		want bool
	}{
		"an https URL is accepted":                           {"https://issuer.example/keys", true},
		"an https URL with a port is accepted":               {"https://issuer.example:8443", true},
		"http to localhost is accepted":                      {"http://localhost:8080/keys", true},
		"http to an IPv4 loopback address is accepted":       {"http://127.0.0.2/keys", true},
		"http to the IPv6 loopback address is accepted":      {"http://[::1]:8080", true},
		"http to a name elsewhere is refused":                {"http://issuer.example/keys", false},
		"http to the metadata address is refused":            {"http://169.254.169.254/latest/meta-data/", false},
		"http to an IPv4-mapped metadata address is refused": {"http://[::ffff:169.254.169.254]/", false},
		"http to a name ending in localhost is refused":      {"http://evil.localhost.example/", false},
		"a file URL is refused":                              {"file:///etc/passwd", false},
		"a gopher URL is refused":                            {"gopher://issuer.example/", false},
		"a relative URL is refused":                          {"issuer.example/keys", false},
		"a URL without a host is refused":                    {"https:///keys", false},
		"an opaque URL is refused":                           {"https:issuer.example", false},
		"user info is refused":                               {"https://user:pass@issuer.example/", false},
		"user info without a password is refused":            {"https://user@issuer.example/", false},
		"a query is refused":                                 {"https://issuer.example/keys?x=1", false},
		"an empty query is refused":                          {"https://issuer.example/keys?", false},
		"a fragment is refused":                              {"https://issuer.example/keys#x", false},
		"a backslash is refused":                             {"https://issuer.example\\@169.254.169.254/", false},
		"a URL over the length limit is refused":             {"https://issuer.example/" + strings.Repeat("a", MaxURLLength), false},
		"an empty string is refused":                         {"", false},
		"port 0 is refused":                                  {"https://issuer.example:0/keys", false},
		"a port over 65535 is refused":                       {"https://issuer.example:65536/keys", false},
		"port 65535 is accepted":                             {"https://issuer.example:65535/keys", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckURL(tc.url)
			if tc.want && err != nil {
				t.Fatalf("CheckURL(%q) = %v, want nil", tc.url, err)
			}
			if !tc.want && !errors.Is(err, ErrRefusedURL) {
				t.Fatalf("CheckURL(%q) = %v, want %v", tc.url, err, ErrRefusedURL)
			}
			if err != nil && len(tc.url) > 8 && strings.Contains(err.Error(), tc.url) {
				t.Errorf("the error %q quotes the URL", err)
			}
		})
	}
}

// TestURLRuleLoopbackHTTP: plain http to a loopback host passes only the
// rule that allows it, and is refused with ErrLoopbackHTTP otherwise;
// the rest of the rule is the same.
func TestURLRuleLoopbackHTTP(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:15014/debug", "http://localhost:8080/", "http://[::1]/", "http://127.9.9.9/", "http://[::ffff:127.0.0.1]/"} {
		if err := (URLRule{LoopbackHTTP: true}).Check(raw); err != nil {
			t.Errorf("with LoopbackHTTP, %q: %v", raw, err)
		}
		if err := (URLRule{}).Check(raw); !errors.Is(err, ErrLoopbackHTTP) || !errors.Is(err, ErrRefusedURL) {
			t.Errorf("without LoopbackHTTP, %q: %v, want ErrLoopbackHTTP", raw, err)
		}
	}
	for _, raw := range []string{"http://issuer.example/", "http://169.254.169.254/", "ftp://127.0.0.1/"} {
		if err := (URLRule{}).Check(raw); !errors.Is(err, ErrRefusedURL) || errors.Is(err, ErrLoopbackHTTP) {
			t.Errorf("%q: %v, want ErrRefusedURL alone", raw, err)
		}
	}
	if err := (URLRule{}).Check("https://127.0.0.1:8443/keys"); err != nil {
		t.Errorf("https to a loopback address: %v", err)
	}
}

// FuzzCheckURL insists that a URL either rule accepts is an absolute
// https URL, or http to a loopback host where the rule allows it, bounded,
// without user info, query or fragment, and with a port in 1-65535.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://issuer.example/keys", "http://127.0.0.1:8080/x", "http://[::1]/", "http://localhost/",
		"http://169.254.169.254/", "https://u@h/", "https://h/?q", "https://h/#f", "https:h", "//h/x",
		"https://h:0/", "https://h:65536/", "https://h:/", "http://[::ffff:127.0.0.1]:1/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, rule := range []URLRule{{}, {LoopbackHTTP: true}} {
			if rule.Check(raw) != nil {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("accepted %q, which does not parse: %v", raw, err)
			}
			if len(raw) > MaxURLLength || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				t.Fatalf("accepted %q", raw)
			}
			if p := u.Port(); p != "" {
				if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
					t.Fatalf("accepted %q with port %q", raw, p)
				}
			}
			loopbackHTTP := u.Scheme == "http" && isLoopbackHost(u.Hostname())
			if u.Scheme != "https" && (!loopbackHTTP || !rule.LoopbackHTTP) {
				t.Fatalf("%+v accepted %q with scheme %q and host %q", rule, raw, u.Scheme, u.Hostname())
			}
		}
	})
}
