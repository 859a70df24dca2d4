package envoygen

import (
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// protocol is how a sidecar treats a service port.
type protocol int

const (
	protoTCP   protocol = iota // opaque bytes: tcp_proxy
	protoHTTP                  // HTTP/1.1: an HTTP connection manager
	protoHTTP2                 // HTTP/2, gRPC: an HTTP connection manager, h2 upstream
	protoAuto                  // undeclared: sniffed, HTTP and TCP chains
	protoUDP                   // not proxied
)

func (p protocol) isHTTP() bool { return p == protoHTTP || p == protoHTTP2 }

// wellKnownTCP are the ports Istio treats as TCP when their protocol is not
// declared: SMTP, DNS, MySQL, MongoDB.
var wellKnownTCP = map[uint32]bool{25: true, 53: true, 3306: true, 27017: true}

// protocolOf decides as Istio's kube.ConvertProtocol: UDP stays UDP; the
// appProtocol (which Port.Protocol holds when the Service sets one) or
// else the port name's prefix before "-" names the protocol.
func protocolOf(p model.Port) protocol {
	name := p.Name
	switch up := strings.ToUpper(p.Protocol); up {
	case "UDP":
		return protoUDP
	case "", "TCP", "SCTP":
	case "KUBERNETES.IO/H2C":
		return protoHTTP2
	case "KUBERNETES.IO/WS":
		return protoHTTP
	case "KUBERNETES.IO/WSS":
		return protoTCP
	default:
		name = p.Protocol
	}
	if len(name) >= len("grpc-web") && strings.EqualFold(name[:len("grpc-web")], "grpc-web") {
		return protoHTTP2
	}
	name, _, _ = strings.Cut(name, "-")
	switch strings.ToLower(name) {
	case "http", "http_proxy":
		return protoHTTP
	case "http2", "grpc":
		return protoHTTP2
	case "tcp", "https", "tls", "mongo", "redis", "mysql":
		return protoTCP
	case "udp":
		return protoUDP
	}
	if wellKnownTCP[p.Port] {
		return protoTCP
	}
	return protoAuto
}

// tlsPort reports whether p's protocol is TLS or HTTPS (Istio's
// IsTLS): a tcp_proxy port whose VirtualService routes choose by SNI
// (tls rules) rather than by destination (tcp rules).
func tlsPort(p model.Port) bool {
	name := p.Name
	switch up := strings.ToUpper(p.Protocol); up {
	case "UDP", "KUBERNETES.IO/H2C", "KUBERNETES.IO/WS":
		return false
	case "KUBERNETES.IO/WSS":
		return true
	case "", "TCP", "SCTP":
	default:
		name = p.Protocol
	}
	name, _, _ = strings.Cut(name, "-")
	return strings.EqualFold(name, "https") || strings.EqualFold(name, "tls")
}
