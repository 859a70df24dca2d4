package model

// InNetwork reports whether a proxy of network proxyNet reaches an
// endpoint of network epNet directly, as Istio's Proxy.InNetwork decides:
// when either network is unknown (empty) or they are the same.
//
// An Envoy proxy reaches the endpoints of another network through that
// network's gateways (NetworkGateways); proxyless gRPC, and any proxy for
// a network without a gateway, only those InNetwork.
func InNetwork(proxyNet, epNet string) bool {
	return proxyNet == "" || epNet == "" || proxyNet == epNet
}

// EndpointsInNetwork returns the endpoints of eps a proxy of network
// reaches directly (InNetwork): eps itself when that is all of them.
func EndpointsInNetwork(eps []Endpoint, network string) []Endpoint {
	if network == "" {
		return eps
	}
	n := 0
	for _, ep := range eps {
		if InNetwork(network, ep.Network) {
			n++
		}
	}
	if n == len(eps) {
		return eps
	}
	out := make([]Endpoint, 0, n)
	for _, ep := range eps {
		if InNetwork(network, ep.Network) {
			out = append(out, ep)
		}
	}
	return out
}
