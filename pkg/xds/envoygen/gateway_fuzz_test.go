package envoygen

import (
	"strings"
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// FuzzGatewayServers: whatever two Gateway servers a namespace writes,
// the router's listeners and routes build and pass Envoy's validation,
// or the server is reported; nothing panics.
func FuzzGatewayServers(f *testing.F) {
	f.Add(uint32(443), "HTTPS", "https", "a.example.com,*.example.com", int32(1), "cert", "", "", "san", uint32(443), "TLS", "b.example.com")
	f.Add(uint32(80), "HTTP", "http", "*", int32(0), "", "", "", "", uint32(80), "http2", "app/x")
	f.Add(uint32(443), "HTTPS", "a.b", "./x,*/y", int32(2), "", "/c.pem", "/k.pem", "", uint32(443), "HTTPS", "x")
	f.Add(uint32(443), "https", "p", "x", int32(4), "", "", "", "", uint32(0), "", "")
	f.Add(uint32(8443), "HTTPS", "p", "x", int32(3), "c", "", "", "spki", uint32(8443), "HTTPS", "x")
	snap := modeltest.Load(f, ingressManifests)
	f.Fuzz(func(t *testing.T, port uint32, protocol, portName, hosts string, mode int32, credential, cert, key, san string, port2 uint32, protocol2, hosts2 string) {
		tls := &networkingv1.ServerTLSSettings{
			Mode: networkingv1.ServerTLSSettings_TLSmode(mode % 6), CredentialName: credential,
			ServerCertificate: cert, PrivateKey: key, SubjectAltNames: []string{san}, VerifyCertificateSpki: []string{san},
		}
		a := &networkingv1.Server{Port: &networkingv1.Port{Number: port, Name: portName, Protocol: protocol}, Hosts: strings.Split(hosts, ","), Tls: tls}
		b := &networkingv1.Server{Port: &networkingv1.Port{Number: port2, Name: portName + "2", Protocol: protocol2}, Hosts: strings.Split(hosts2, ",")}
		if mode%2 == 0 {
			b.Tls = tls
		}
		s := withGateways(snap, gateway("istio-system", "a", ingressSelector, a), gateway("app", "b", nil, b))
		g := &Generator{TrustDomain: td}
		for _, typeURL := range []string{resource.ListenerType, resource.RouteType} {
			for _, r := range g.Generate(s, ingress(), typeURL, nil, true) {
				m, err := r.Message(typeURL)
				if err != nil {
					t.Fatalf("%s %s: %v", typeURL, r.Name, err)
				}
				if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
					t.Fatalf("%s %s: %v", typeURL, r.Name, err)
				}
			}
		}
		g.GatewayProblems(s, ingress())
	})
}
