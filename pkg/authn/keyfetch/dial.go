package keyfetch

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrRefusedAddress: a fetch would connect to an address istiod never
// fetches key material from.
var ErrRefusedAddress = errors.New("refused address")

// refusedPrefixes are the addresses where a cloud keeps instance metadata
// and credentials, besides the link-local and unspecified addresses that
// addressGuard refuses by kind.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local; AWS, GCP, Azure metadata
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
}

// addressGuard decides, at dial time and so after name resolution, which
// addresses a fetch may connect to.
type addressGuard struct {
	// refused are refused besides link-local and unspecified addresses.
	refused []netip.Prefix
	// allowed are accepted although refused otherwise.
	allowed []netip.Prefix
}

// check returns nil when addr, the resolved address being dialled, may be
// connected to.
func (g addressGuard) check(addr netip.Addr) error {
	addr = addr.Unmap().WithZone("")
	for _, p := range g.allowed {
		if p.Contains(addr) {
			return nil
		}
	}
	if addr.IsUnspecified() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%s: %w", addr, ErrRefusedAddress)
	}
	for _, p := range g.refused {
		if p.Contains(addr) {
			return fmt.Errorf("%s: %w", addr, ErrRefusedAddress)
		}
	}
	return nil
}

// control is a net.Dialer Control function: it runs once the address is
// resolved and before the connection is attempted.
func (g addressGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %q: %w", address, ErrRefusedAddress)
	}
	return g.check(ap.Addr())
}
