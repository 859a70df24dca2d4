package keyfetch

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAddressGuard(t *testing.T) {
	guard := addressGuard{refused: refusedPrefixes}
	allowing := addressGuard{refused: refusedPrefixes, allowed: []netip.Prefix{
		netip.MustParsePrefix("169.254.169.254/32"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
	}}
	tests := map[string]struct {
		guard   addressGuard
		address string
		refused bool
	}{
		"the AWS, GCP and Azure metadata address is refused":     {guard, "169.254.169.254:80", true},
		"another IPv4 link-local address is refused":             {guard, "169.254.1.1:443", true},
		"the AWS IPv6 metadata address is refused":               {guard, "[fd00:ec2::254]:80", true},
		"the Alibaba Cloud metadata address is refused":          {guard, "100.100.100.200:80", true},
		"an IPv6 link-local address is refused":                  {guard, "[fe80::1]:443", true},
		"an IPv6 link-local address with a zone is refused":      {guard, "[fe80::1%eth0]:443", true},
		"the IPv4 unspecified address is refused":                {guard, "0.0.0.0:443", true},
		"the IPv6 unspecified address is refused":                {guard, "[::]:443", true},
		"an IPv4-mapped metadata address is refused":             {guard, "[::ffff:169.254.169.254]:80", true},
		"an unparsable address is refused":                       {guard, "metadata.internal:80", true},
		"a public address is accepted":                           {guard, "203.0.113.7:443", false},
		"a loopback address is accepted":                         {guard, "127.0.0.1:8080", false},
		"a private address is accepted":                          {guard, "10.96.0.1:443", false},
		"another address of 100.64.0.0/10 is accepted":           {guard, "100.100.100.201:443", false},
		"an allow-listed metadata address is accepted":           {allowing, "169.254.169.254:80", false},
		"an allow-listed IPv6 metadata address is accepted":      {allowing, "[fd00:ec2::254]:80", false},
		"a link-local address outside the allow-list is refused": {allowing, "169.254.169.253:80", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.guard.control("tcp", tc.address, nil)
			if tc.refused != errors.Is(err, ErrRefusedAddress) || (!tc.refused && err != nil) {
				t.Fatalf("control(%q) = %v, refused want %t", tc.address, err, tc.refused)
			}
		})
	}
}
