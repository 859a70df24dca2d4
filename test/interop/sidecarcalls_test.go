package interop

import (
	"fmt"
	"strconv"

	"istio.io/istio/pilot/pkg/simulation"
	corev1 "k8s.io/api/core/v1"
)

// simCall is one connection the simulator makes, named for the report.
type simCall struct {
	name string
	call simulation.Call
}

// Addresses outside the mesh: an unknown destination, and the port no
// service or workload declares.
const (
	unknownIP       = "192.0.2.10"
	undeclaredPort  = 12345
	outboundPort    = 15001
	inboundPort     = 15006
	unknownHostName = "example.com"
)

// tlsVariants are the ways a client reaches an inbound port: Istio mTLS
// with the ALPN Istio's clients send, its own TLS (not Istio's: no istio
// ALPN), and plaintext.
func tlsVariants(proto simulation.Protocol) []struct {
	name string
	tls  simulation.TLSMode
	alpn string
} {
	mtlsALPN, tlsALPN := "istio", ""
	switch proto {
	case simulation.HTTP:
		mtlsALPN, tlsALPN = "istio-http/1.1", "http/1.1"
	case simulation.HTTP2:
		mtlsALPN, tlsALPN = "istio-h2", "h2"
	}
	return []struct {
		name string
		tls  simulation.TLSMode
		alpn string
	}{
		{"mTLS (alpn " + mtlsALPN + ")", simulation.MTLS, mtlsALPN},
		{"TLS (alpn " + strconv.Quote(tlsALPN) + ")", simulation.TLS, tlsALPN},
		{"plaintext", simulation.Plaintext, ""},
	}
}

// protocolsOf are the protocols a client may speak to a port Istio reads
// as proto: both HTTP and TCP when undeclared.
func protocolsOf(proto string) []simulation.Protocol {
	switch proto {
	case "http":
		return []simulation.Protocol{simulation.HTTP}
	case "http2":
		return []simulation.Protocol{simulation.HTTP2}
	case "tcp":
		return []simulation.Protocol{simulation.TCP}
	}
	return []simulation.Protocol{simulation.HTTP, simulation.TCP}
}

// inboundCalls are the connections iptables sends to the pod's 15006: to
// every target port of the services that select it, under every TLS
// variant; to an undeclared port; to 15006 itself (a loop).
func inboundCalls(w *meshObjects, pod *corev1.Pod) []simCall {
	var out []simCall
	add := func(what string, port int, proto simulation.Protocol) {
		for _, v := range tlsVariants(proto) {
			out = append(out, simCall{
				name: fmt.Sprintf("inbound %s %s to %s", v.name, proto, what),
				call: simulation.Call{
					CallMode: simulation.CallModeInbound,
					Address:  pod.Status.PodIP,
					Port:     port,
					Protocol: proto,
					TLS:      v.tls,
					Alpn:     v.alpn,
				},
			})
		}
	}
	for _, s := range w.servicesOf(pod) {
		for _, p := range s.Spec.Ports {
			what := fmt.Sprintf("target port %d (%s port %s)", numericTargetPort(p), s.Name, p.Name)
			for _, proto := range protocolsOf(portProtocol(p)) {
				add(what, numericTargetPort(p), proto)
			}
		}
	}
	for _, proto := range []simulation.Protocol{simulation.HTTP, simulation.TCP} {
		add(fmt.Sprintf("undeclared port %d", undeclaredPort), undeclaredPort, proto)
	}
	for _, proto := range []simulation.Protocol{simulation.HTTP, simulation.TCP} {
		add(fmt.Sprintf("port %d (loop)", inboundPort), inboundPort, proto)
	}
	return out
}

// outboundCalls are the connections the pod's application opens, which
// iptables sends to 15001: plaintext HTTP to every HTTP port of every
// service by each name the Host header may carry, TCP and TLS to every
// TCP port's VIP, and traffic to destinations the mesh does not know.
func outboundCalls(w *meshObjects, pod *corev1.Pod) []simCall {
	var out []simCall
	add := func(name string, c simulation.Call) {
		c.CallMode = simulation.CallModeOutbound
		out = append(out, simCall{name: "outbound " + name, call: c})
	}
	for _, s := range w.services {
		// A headless service is reached at its endpoints' addresses.
		vips := []string{s.Spec.ClusterIP}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			vips = nil
			for _, p := range w.endpointPods(s) {
				vips = append(vips, p.Status.PodIP)
			}
		}
		for _, vip := range vips {
			out = append(out, serviceCalls(s, vip)...)
		}
	}
	// Two services share HTTP port 80: an unknown host on it, by name and
	// by address.
	add(fmt.Sprintf("http to %s:80 Host %s", unknownIP, unknownHostName),
		simulation.Call{Address: unknownIP, Port: 80, Protocol: simulation.HTTP, HostHeader: unknownHostName})
	add(fmt.Sprintf("http to %s:80 Host %s", unknownIP, unknownIP),
		simulation.Call{Address: unknownIP, Port: 80, Protocol: simulation.HTTP, HostHeader: unknownIP})
	// An unknown address on a port only a service VIP listens on.
	add(fmt.Sprintf("TCP to %s:9090", unknownIP), simulation.Call{Address: unknownIP, Port: 9090, Protocol: simulation.TCP})
	// An unknown address and port.
	add(fmt.Sprintf("TCP to %s:%d", unknownIP, undeclaredPort),
		simulation.Call{Address: unknownIP, Port: undeclaredPort, Protocol: simulation.TCP})
	add(fmt.Sprintf("http to %s:%d Host %s", unknownIP, undeclaredPort, unknownHostName),
		simulation.Call{Address: unknownIP, Port: undeclaredPort, Protocol: simulation.HTTP, HostHeader: unknownHostName})
	add(fmt.Sprintf("TLS to %s:%d", unknownIP, undeclaredPort),
		simulation.Call{Address: unknownIP, Port: undeclaredPort, Protocol: simulation.TCP, TLS: simulation.TLS, Sni: unknownHostName})
	// A pod's address directly, not its service's.
	add("TCP to pod 10.0.1.5:9090", simulation.Call{Address: "10.0.1.5", Port: 9090, Protocol: simulation.TCP})
	// The loop guard.
	add(fmt.Sprintf("TCP to %s:%d (loop)", unknownIP, outboundPort),
		simulation.Call{Address: unknownIP, Port: outboundPort, Protocol: simulation.TCP})
	add(fmt.Sprintf("http to %s:%d (loop)", unknownIP, outboundPort),
		simulation.Call{Address: unknownIP, Port: outboundPort, Protocol: simulation.HTTP, HostHeader: unknownHostName})
	return out
}

// serviceCalls are the outbound connections to service s at address vip
// (its cluster IP, or an endpoint's address when headless): plaintext
// HTTP to every HTTP port by each name the Host header may carry, TCP and
// TLS to every TCP port, both to a port whose protocol is not declared.
func serviceCalls(s *corev1.Service, vip string) []simCall {
	var out []simCall
	add := func(name string, c simulation.Call) {
		c.CallMode = simulation.CallModeOutbound
		out = append(out, simCall{name: "outbound " + name, call: c})
	}
	for _, p := range s.Spec.Ports {
		port := int(p.Port)
		for _, proto := range protocolsOf(portProtocol(p)) {
			if proto == simulation.TCP {
				add(fmt.Sprintf("TCP to %s:%d (%s port %s)", vip, port, s.Name, p.Name),
					simulation.Call{Address: vip, Port: port, Protocol: simulation.TCP})
				add(fmt.Sprintf("TLS to %s:%d (%s port %s)", vip, port, s.Name, p.Name),
					simulation.Call{Address: vip, Port: port, Protocol: simulation.TCP, TLS: simulation.TLS, Sni: serviceFQDN(s)})
				continue
			}
			hosts := []string{
				serviceFQDN(s), fmt.Sprintf("%s:%d", serviceFQDN(s), port),
				s.Name, fmt.Sprintf("%s:%d", s.Name, port),
				s.Name + "." + s.Namespace, fmt.Sprintf("%s.%s:%d", s.Name, s.Namespace, port),
				vip, fmt.Sprintf("%s:%d", vip, port),
			}
			for _, h := range hosts {
				add(fmt.Sprintf("%s to %s:%d Host %s", proto, vip, port, h),
					simulation.Call{Address: vip, Port: port, Protocol: proto, HostHeader: h})
			}
		}
	}
	return out
}
