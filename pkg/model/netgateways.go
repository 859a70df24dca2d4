package model

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync"
)

// Labels and ports of network gateways, as Istio reads them.
const (
	// GatewayPortLabel on a Service labelled with NetworkLabel names the
	// port its network's mTLS traffic enters by (default 15443).
	GatewayPortLabel   = "networking.istio.io/gatewayPort"
	DefaultGatewayPort = 15443
	// NodeSelectorAnnotation on a Service of type NodePort makes it a
	// gateway reached at the external IPs of the nodes the annotation's
	// labels select (unless it has externalIPs), on the node ports, as
	// in Istio.
	NodeSelectorAnnotation = "traffic.istio.io/nodeSelector"
	// gatewayHBONEPort is the port of ambient east-west gateways, which
	// Envoy sidecars do not use.
	gatewayHBONEPort = 15008
	// MaxGateways bounds the gateways of the whole mesh; the rest are
	// left out and reported.
	MaxGateways = 4096
)

// Exposure is what one cluster says of how its Service of a hostname is
// reached from outside the cluster: what makes it a network gateway.
// Sources set it on a Service with an ingress address or the
// topology.istio.io/network label; the cluster merge keeps every
// cluster's.
type Exposure struct {
	Cluster string
	// Network is the Service's topology.istio.io/network label: it is
	// that network's gateway. Empty: it may be one by meshNetworks'
	// registryServiceName.
	Network string
	// GatewayPort is its networking.istio.io/gatewayPort label as written.
	GatewayPort string
	// Addresses are its load balancer's ingress IPs or hostnames, then its
	// externalIPs.
	Addresses []string
	// Ports are the Service's port numbers in that cluster.
	Ports []uint32
	// NodePort: the Service is of type NodePort with Istio's
	// NodeSelectorAnnotation, a gateway reached at its externalIPs, else
	// at the external IPs of the nodes the annotation selects (Addresses),
	// on the node port of its gateway port: NodePorts are the node ports
	// of Ports, one for one (0: none).
	NodePort  bool
	NodePorts []uint32
	// NodeSelectorInvalid: the annotation is not a JSON map of labels;
	// the gateway is left out (Istio picks every node).
	NodeSelectorInvalid bool
}

// nodePort is the port a gateway on port is reached by: its node port,
// for a NodePort gateway with one, else port.
func (e *Exposure) nodePort(port uint32) uint32 {
	if i := slices.Index(e.Ports, port); e.NodePort && i >= 0 && i < len(e.NodePorts) && e.NodePorts[i] != 0 {
		return e.NodePorts[i]
	}
	return port
}

func sameExposures(a, b []Exposure) bool {
	return slices.EqualFunc(a, b, func(x, y Exposure) bool {
		return x.Cluster == y.Cluster && x.Network == y.Network && x.GatewayPort == y.GatewayPort && x.NodePort == y.NodePort &&
			x.NodeSelectorInvalid == y.NodeSelectorInvalid && slices.Equal(x.NodePorts, y.NodePorts) &&
			slices.Equal(x.Addresses, y.Addresses) && slices.Equal(x.Ports, y.Ports)
	})
}

// NetworkGateway is a gateway into a network: an address and port other
// networks' proxies send that network's mTLS traffic to, the endpoint of
// every remote endpoint it stands for (Istio's split-horizon EDS).
type NetworkGateway struct {
	Network string
	// Cluster is the cluster whose Service it is; "" for an address of
	// meshNetworks.
	Cluster string
	Address string
	// Port is its mTLS port; 0 for a gateway of ambient meshes only
	// (HBONE), which Envoy sidecars cannot use.
	Port uint32
}

// NetworkGateways are the mesh's network gateways, from meshNetworks and
// the Services that expose a network, as Istio's network manager merges
// them. Nil or empty: no network has a gateway, and every endpoint is
// reached directly.
type NetworkGateways struct {
	byNetwork        map[string][]NetworkGateway
	byNetworkCluster map[[2]string][]NetworkGateway
	scale            uint32
	// Key identifies the gateways: equal keys, equal gateways.
	Key string
	// Problems are what was left out, and why, sorted.
	Problems []string
}

// Enabled reports whether some network has a gateway: only then are the
// endpoints of other networks reached through one (Istio's
// IsMultiNetworkEnabled).
func (g *NetworkGateways) Enabled() bool { return g != nil && len(g.byNetwork) > 0 }

// ScaleFactor is the least common multiple of the number of gateways of
// each network and of each network and cluster: endpoint weights are
// multiplied by it, so that an endpoint's weight splits evenly among the
// gateways that stand for it.
func (g *NetworkGateways) ScaleFactor() uint32 {
	if g == nil || g.scale == 0 {
		return 1
	}
	return g.scale
}

// For are the gateways through which an endpoint of network and cluster
// is reached, sorted by address and port: those of its network and
// cluster, else those of its network; with mTLS ports only (what Envoy
// sidecars and routers use).
func (g *NetworkGateways) For(network, cluster string) []NetworkGateway {
	if g == nil {
		return nil
	}
	gws := g.byNetworkCluster[[2]string{network, cluster}]
	if len(gws) == 0 {
		gws = g.byNetwork[network]
	}
	if !slices.ContainsFunc(gws, func(gw NetworkGateway) bool { return gw.Port == 0 }) {
		return gws
	}
	return slices.DeleteFunc(slices.Clone(gws), func(gw NetworkGateway) bool { return gw.Port == 0 })
}

// Networks are the networks that have a gateway, sorted.
func (g *NetworkGateways) Networks() []string {
	if g == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(g.byNetwork))
}

// All are every gateway, sorted by network, address and port.
func (g *NetworkGateways) All() []NetworkGateway {
	if g == nil {
		return nil
	}
	var out []NetworkGateway
	for _, n := range g.Networks() {
		out = append(out, g.byNetwork[n]...)
	}
	return out
}

// ComputeNetworkGateways finds the gateways of services under nets:
//   - each gateway of meshNetworks with an address (its cluster unknown);
//   - each Service a cluster labels topology.istio.io/network: at each of
//     its ingress addresses, on the port its networking.istio.io/gatewayPort
//     label names (default 15443) if the Service has that port;
//   - else each Service a meshNetworks gateway names by registryServiceName,
//     in a cluster the network's fromRegistry names, at each of its
//     ingress addresses, on the gateway's port.
//
// Istio resolves a gateway's DNS name in istiod; Bulwark does not, and
// leaves such a gateway out (a Problem), as it does a gateway Service
// without an ingress address. A NodePort gateway (Exposure.NodePort) is
// reached on the node port of its gateway port, as in Istio.
func ComputeNetworkGateways(services []*Service, nets *MeshNetworks) *NetworkGateways {
	set := map[NetworkGateway]bool{}
	var problems []string
	add := func(gw NetworkGateway, what string) {
		if _, err := netip.ParseAddr(gw.Address); err != nil {
			problems = append(problems, fmt.Sprintf("%s of network %s: address %q is a DNS name, which is not resolved: left out", what, gw.Network, truncate(gw.Address)))
			return
		}
		if len(set) >= MaxGateways && !set[gw] {
			problems = append(problems, fmt.Sprintf("%s of network %s: more than %d gateways: left out", what, gw.Network, MaxGateways))
			return
		}
		set[gw] = true
	}
	// A registryServiceName gateway is the Service of that name in a
	// cluster its network's fromRegistry names, as Istio's registry of
	// that cluster finds it.
	type registryGateway struct {
		network  string
		port     uint32
		clusters []string
	}
	byService := map[string][]registryGateway{} // by hostname
	if nets != nil {
		for _, n := range nets.Networks {
			for _, cidr := range n.CIDRs {
				problems = append(problems, fmt.Sprintf("network %s: fromCidr %s is not read: endpoints are placed by their cluster and pod label only", n.Name, cidr))
			}
			for _, gw := range n.Gateways {
				if gw.Address != "" {
					add(NetworkGateway{Network: n.Name, Address: gw.Address, Port: gw.Port}, "meshNetworks gateway")
					continue
				}
				byService[gw.RegistryService] = append(byService[gw.RegistryService], registryGateway{n.Name, gw.Port, n.Registries})
			}
		}
	}
	for _, svc := range services {
		for _, e := range svc.Exposures {
			what := fmt.Sprintf("gateway Service %s/%s of cluster %q", svc.Namespace, svc.Name, e.Cluster)
			var gws []NetworkGateway
			switch {
			case e.Network != "":
				port, hbone := uint32(DefaultGatewayPort), uint32(gatewayHBONEPort)
				if e.GatewayPort != "" {
					p, err := strconv.ParseUint(e.GatewayPort, 10, 16)
					if err != nil || p == 0 {
						problems = append(problems, fmt.Sprintf("%s: label %s=%q is not a port: %d assumed, as Istio does", what, GatewayPortLabel, truncate(e.GatewayPort), DefaultGatewayPort))
					} else {
						port = uint32(p)
					}
				}
				mtls, hb := slices.Contains(e.Ports, port), slices.Contains(e.Ports, hbone)
				if !mtls && !hb {
					problems = append(problems, fmt.Sprintf("%s of network %s: has neither port %d nor %d: not a gateway", what, e.Network, port, hbone))
					continue
				}
				if !mtls {
					port = 0
				}
				gws = []NetworkGateway{{Network: e.Network, Cluster: e.Cluster, Port: port}}
			default:
				for _, rg := range byService[svc.Hostname] {
					if slices.Contains(rg.clusters, e.Cluster) {
						gws = append(gws, NetworkGateway{Network: rg.network, Cluster: e.Cluster, Port: rg.port})
					}
				}
				if len(gws) == 0 {
					continue // an ingress address, not a gateway
				}
			}
			if e.NodeSelectorInvalid {
				problems = append(problems, fmt.Sprintf("%s of network %s: a NodePort gateway whose %s is not a JSON map of labels: "+
					"left out (Istio picks every node)", what, gws[0].Network, NodeSelectorAnnotation))
				continue
			}
			if e.NodePort && len(e.Addresses) == 0 {
				problems = append(problems, fmt.Sprintf("%s of network %s: a NodePort gateway (%s) without externalIPs, and no node it "+
					"selects has an external IP: not a gateway yet", what, gws[0].Network, NodeSelectorAnnotation))
				continue
			}
			if len(e.Addresses) == 0 {
				problems = append(problems, fmt.Sprintf("%s of network %s: no ingress address (status.loadBalancer.ingress or externalIPs): not a gateway yet", what, gws[0].Network))
				continue
			}
			for _, a := range e.Addresses {
				for _, gw := range gws {
					gw.Address = a
					if gw.Port != 0 {
						gw.Port = e.nodePort(gw.Port)
					}
					add(gw, what)
				}
			}
		}
	}
	g := &NetworkGateways{byNetwork: map[string][]NetworkGateway{}, byNetworkCluster: map[[2]string][]NetworkGateway{}, scale: 1}
	all := slices.SortedFunc(maps.Keys(set), compareGateways)
	h := sha256.New()
	for _, gw := range all {
		g.byNetwork[gw.Network] = append(g.byNetwork[gw.Network], gw)
		k := [2]string{gw.Network, gw.Cluster}
		g.byNetworkCluster[k] = append(g.byNetworkCluster[k], gw)
		fmt.Fprintf(h, "%d:%s%d:%s%d:%s%d;", len(gw.Network), gw.Network, len(gw.Cluster), gw.Cluster, len(gw.Address), gw.Address, gw.Port)
	}
	for _, gws := range g.byNetwork {
		g.scale = lcm(g.scale, uint32(len(gws)))
	}
	for _, gws := range g.byNetworkCluster {
		g.scale = lcm(g.scale, uint32(len(gws)))
	}
	if len(all) > 0 {
		g.Key = hex.EncodeToString(h.Sum(nil))[:16]
	}
	slices.Sort(problems)
	g.Problems = slices.Compact(problems)
	return g
}

// compareGateways orders gateways by network, then as Istio sorts them:
// by address, then port; then by cluster.
func compareGateways(a, b NetworkGateway) int {
	return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Cluster, b.Cluster))
}

// lcm is the least common multiple of a and b, at most 2^16 (a scale
// beyond it is kept there: weights would overflow sooner than spread).
func lcm(a, b uint32) uint32 {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return uint32(min(uint64(a)/uint64(x)*uint64(b), 1<<16))
}

// lazyGateways holds a snapshot's gateways under the meshNetworks last
// asked for.
type lazyGateways struct {
	mu   sync.Mutex
	nets *MeshNetworks
	done bool
	gws  *NetworkGateways
}

// NetworkGateways are the snapshot's network gateways under nets
// (ComputeNetworkGateways), computed once per snapshot and nets.
func (s *Snapshot) NetworkGateways(nets *MeshNetworks) *NetworkGateways {
	l := s.gateways
	if l == nil {
		return ComputeNetworkGateways(s.services, nets)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done || l.nets != nets {
		l.gws, l.nets, l.done = ComputeNetworkGateways(s.services, nets), nets, true
	}
	return l.gws
}
