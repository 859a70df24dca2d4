package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Bounds on meshNetworks, which istiod's operator writes but which a
// careless one could make large: each network and gateway costs every
// proxy of another network a lookup per endpoint.
const (
	MaxMeshNetworksBytes = 1 << 20
	MaxNetworks          = 1024
	// MaxNetworkGateways bounds a network's gateways and its endpoints
	// entries (fromRegistry, fromCidr) alike.
	MaxNetworkGateways = 64
)

// ErrMeshNetworks marks meshNetworks that are refused.
var ErrMeshNetworks = errors.New("invalid meshNetworks")

// MeshNetworks is Istio's meshNetworks (the istio ConfigMap's
// "meshNetworks", istiod's --networksConfig file): the networks of the
// mesh, the registries (clusters) whose endpoints are on each, and the
// gateways through which each is reached from the others.
type MeshNetworks struct {
	// Networks are sorted by name.
	Networks []MeshNetwork
}

// MeshNetwork is one network of meshNetworks.
type MeshNetwork struct {
	Name string
	// Registries are its fromRegistry entries: the IDs of the clusters
	// whose endpoints are on the network.
	Registries []string
	// CIDRs are its fromCidr entries. Bulwark does not place endpoints
	// by address (NetworkGateways reports them).
	CIDRs []netip.Prefix
	// Gateways are its gateways: an address, or a Service of a registry
	// of the network whose ingress addresses are the gateway's.
	Gateways []MeshNetworkGateway
}

// MeshNetworkGateway is one gateway of a network: Address or
// RegistryService is set.
type MeshNetworkGateway struct {
	Address         string
	RegistryService string // a Service hostname
	Port            uint32
}

// ParseMeshNetworks reads meshNetworks in YAML or JSON, as Istio's
// ConfigMap holds it, and checks it as Istio's validation does, within
// bounds: a network's fromRegistry must be a DNS label, fromCidr a CIDR,
// a gateway's registryServiceName a DNS name and its address an IP
// address or a DNS name, and its port 1-65535. Empty data is no networks.
func ParseMeshNetworks(data []byte) (*MeshNetworks, error) {
	if len(data) > MaxMeshNetworksBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMeshNetworks, len(data), MaxMeshNetworksBytes)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeshNetworks, err)
	}
	var mn meshv1alpha1.MeshNetworks
	if s := strings.TrimSpace(string(js)); s != "" && s != "null" {
		if err := protojson.Unmarshal(js, &mn); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMeshNetworks, err)
		}
	}
	return meshNetworksOf(&mn)
}

// meshNetworksOf checks and converts mn.
func meshNetworksOf(mn *meshv1alpha1.MeshNetworks) (*MeshNetworks, error) {
	if n := len(mn.GetNetworks()); n > MaxNetworks {
		return nil, fmt.Errorf("%w: %d networks, limit %d", ErrMeshNetworks, n, MaxNetworks)
	}
	out := &MeshNetworks{}
	for name, nw := range mn.GetNetworks() {
		if name == "" || len(name) > 253 || strings.ContainsAny(name, " \t\n/") {
			return nil, fmt.Errorf("%w: network name %q", ErrMeshNetworks, truncate(name))
		}
		if len(nw.GetEndpoints()) > MaxNetworkGateways || len(nw.GetGateways()) > MaxNetworkGateways {
			return nil, fmt.Errorf("%w: network %s: %d endpoints entries and %d gateways, limit %d each",
				ErrMeshNetworks, name, len(nw.GetEndpoints()), len(nw.GetGateways()), MaxNetworkGateways)
		}
		n := MeshNetwork{Name: name}
		for _, ep := range nw.GetEndpoints() {
			switch {
			case ep.GetFromCidr() != "":
				p, err := netip.ParsePrefix(ep.GetFromCidr())
				if err != nil {
					return nil, fmt.Errorf("%w: network %s: fromCidr %q: %w", ErrMeshNetworks, name, truncate(ep.GetFromCidr()), err)
				}
				n.CIDRs = append(n.CIDRs, p)
			case ep.GetFromRegistry() != "":
				if !dnsLabel(ep.GetFromRegistry()) {
					return nil, fmt.Errorf("%w: network %s: fromRegistry %q is not a DNS label", ErrMeshNetworks, name, truncate(ep.GetFromRegistry()))
				}
				n.Registries = append(n.Registries, ep.GetFromRegistry())
			default:
				return nil, fmt.Errorf("%w: network %s: an endpoints entry names neither fromCidr nor fromRegistry", ErrMeshNetworks, name)
			}
		}
		for i, gw := range nw.GetGateways() {
			g := MeshNetworkGateway{Port: gw.GetPort()}
			if g.Port == 0 || g.Port > 65535 {
				return nil, fmt.Errorf("%w: network %s: gateway %d: port %d is not 1-65535", ErrMeshNetworks, name, i, gw.GetPort())
			}
			switch {
			case gw.GetRegistryServiceName() != "":
				if !dnsName(gw.GetRegistryServiceName()) {
					return nil, fmt.Errorf("%w: network %s: gateway %d: registryServiceName %q is not a DNS name", ErrMeshNetworks, name, i, truncate(gw.GetRegistryServiceName()))
				}
				g.RegistryService = strings.ToLower(gw.GetRegistryServiceName())
			case gw.GetAddress() != "":
				a := gw.GetAddress()
				if ip, err := netip.ParseAddr(a); err == nil {
					a = ip.String()
				} else if !dnsName(a) {
					return nil, fmt.Errorf("%w: network %s: gateway %d: address %q is neither an IP address nor a DNS name", ErrMeshNetworks, name, i, truncate(a))
				}
				g.Address = a
			default:
				return nil, fmt.Errorf("%w: network %s: gateway %d names neither address nor registryServiceName", ErrMeshNetworks, name, i)
			}
			n.Gateways = append(n.Gateways, g)
		}
		out.Networks = append(out.Networks, n)
	}
	slices.SortFunc(out.Networks, func(a, b MeshNetwork) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// NetworkOfRegistry is the network whose fromRegistry names cluster, the
// first by name when several do; "" for none.
func (m *MeshNetworks) NetworkOfRegistry(cluster string) string {
	if m == nil || cluster == "" {
		return ""
	}
	for _, n := range m.Networks {
		if slices.Contains(n.Registries, cluster) {
			return n.Name
		}
	}
	return ""
}

// Equal reports whether m and o are the same meshNetworks; nil is none.
func (m *MeshNetworks) Equal(o *MeshNetworks) bool {
	var a, b []MeshNetwork
	if m != nil {
		a = m.Networks
	}
	if o != nil {
		b = o.Networks
	}
	return slices.EqualFunc(a, b, func(x, y MeshNetwork) bool {
		return x.Name == y.Name && slices.Equal(x.Registries, y.Registries) && slices.Equal(x.CIDRs, y.CIDRs) &&
			slices.Equal(x.Gateways, y.Gateways)
	})
}

// Names are the networks' names, sorted.
func (m *MeshNetworks) Names() []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(m.Networks))
	for _, n := range m.Networks {
		out = append(out, n.Name)
	}
	return out
}

// dnsLabel reports whether s is an RFC 1123 label.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// dnsName reports whether s is a DNS name of RFC 1123 labels (a final dot
// allowed), not an address.
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !dnsLabel(l) {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
