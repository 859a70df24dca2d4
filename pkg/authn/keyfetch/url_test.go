package keyfetch

import (
	"errors"
	"net/url"
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

// FuzzCheckURL insists that an accepted URL is an absolute https URL, or
// http to a loopback host, bounded and without user info, query or fragment.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://issuer.example/keys", "http://127.0.0.1:8080/x", "http://[::1]/", "http://localhost/",
		"http://169.254.169.254/", "https://u@h/", "https://h/?q", "https://h/#f", "https:h", "//h/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if CheckURL(raw) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("accepted %q, which does not parse: %v", raw, err)
		}
		if len(raw) > MaxURLLength || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted %q", raw)
		}
		if u.Scheme != "https" && (u.Scheme != "http" || !isLoopbackHost(u.Hostname())) {
			t.Fatalf("accepted %q with scheme %q and host %q", raw, u.Scheme, u.Hostname())
		}
	})
}
