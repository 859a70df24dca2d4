package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// The agreement of ValidateSidecar with Istio's validator is tested in
// test/interop (TestSidecarValidationAgreesWithIstio); these cases cover
// the bounds Istio does not set.
func TestSidecarLimits(t *testing.T) {
	hosts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("ns%d/*", i)
		}
		return out
	}
	listeners := func(n int) []*networking.IstioEgressListener {
		out := make([]*networking.IstioEgressListener, n)
		for i := range out {
			out[i] = &networking.IstioEgressListener{Port: &networking.SidecarPort{Number: uint32(1000 + i)}, Hosts: []string{"./*"}}
		}
		return out
	}
	for name, tc := range map[string]struct {
		spec *networking.Sidecar
		want string
	}{
		"1024 egress hosts are allowed": {spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: hosts(MaxSidecarHosts)}}}},
		"1025 egress hosts are refused": {
			spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: hosts(MaxSidecarHosts - 1)}, {Hosts: []string{"./*", "*/*"}}}},
			want: "spec.egress: 1025 hosts, more than 1024",
		},
		"128 egress listeners are allowed": {spec: &networking.Sidecar{Egress: listeners(MaxSidecarListeners)}},
		"129 egress listeners are refused": {spec: &networking.Sidecar{Egress: listeners(MaxSidecarListeners + 1)}, want: "129 listeners, more than 128"},
		"129 ingress listeners are refused": {spec: &networking.Sidecar{Ingress: func() []*networking.IstioIngressListener {
			out := make([]*networking.IstioIngressListener, MaxSidecarListeners+1)
			for i := range out {
				out[i] = &networking.IstioIngressListener{Port: &networking.SidecarPort{Number: uint32(1000 + i), Protocol: "HTTP"}}
			}
			return out
		}()}, want: "spec.ingress: 129 listeners"},
	} {
		t.Run(name, func(t *testing.T) {
			f := ValidateSidecar("app", tc.spec)
			got := strings.Join(f.Errors, "\n")
			if (tc.want == "") != f.OK() || !strings.Contains(got, tc.want) {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSidecarFieldsRead checks what the reporter and the webhook's
// warnings say is not honoured of a Sidecar.
func TestSidecarFieldsRead(t *testing.T) {
	for name, tc := range map[string]struct {
		spec string
		want []string
	}{
		"egress hosts, ports, a selector and the outbound policy are honoured": {
			spec: `{"workloadSelector":{"labels":{"app":"a"}},"egress":[{"port":{"number":80,"name":"http"},"hosts":["./*"]},{"hosts":["istio-system/*"]}],"outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"}}`,
		},
		"ingress listeners and the inbound pool are honoured": {
			spec: `{"ingress":[{"port":{"number":80,"protocol":"HTTP","name":"http"},"bind":"0.0.0.0","captureMode":"IPTABLES","defaultEndpoint":"127.0.0.1:8080","connectionPool":{"http":{"http2MaxRequests":10}}}],"inboundConnectionPool":{"tcp":{"maxConnections":10}}}`,
		},
		"an ingress listener bound to its port is not, its tls only where istiod is told to": {
			spec: `{"ingress":[{"port":{"number":8443,"protocol":"HTTPS","name":"https"},"captureMode":"NONE","defaultEndpoint":"127.0.0.1:8080","tls":{"mode":"SIMPLE","serverCertificate":"/etc/c.pem","privateKey":"/etc/k.pem"}}]}`,
			want: []string{
				"spec.ingress[0].captureMode: NONE is not honoured: no listener is bound to the port; traffic redirected to it takes the inbound passthrough chains (its cluster is built)",
				"spec.ingress[0].tls: honoured only where istiod runs with ENABLE_TLS_ON_SIDECAR_INGRESS=true (--tls-on-sidecar-ingress), as in Istio; otherwise the port is served as without it",
			},
		},
		"an egress listener's bind, capture mode and protocol are not": {
			spec: `{"egress":[{"port":{"number":3306,"protocol":"MYSQL","name":"db"},"bind":"127.0.0.2","captureMode":"NONE","hosts":["./*"]}]}`,
			want: []string{
				"spec.egress[0].bind: not honoured; the listener's services are served on their own addresses as without it",
				"spec.egress[0].captureMode: not honoured; traffic is captured as by default",
				"spec.egress[0].port.protocol: not honoured; the services' ports keep their own protocols (the listener imports only their port of this number)",
			},
		},
		"an egress proxy is not": {
			spec: `{"outboundTrafficPolicy":{"mode":"ALLOW_ANY","egressProxy":{"host":"proxy.example.com","port":{"number":3128}}}}`,
			want: []string{"spec.outboundTrafficPolicy.egressProxy: not honoured; unknown destinations pass through directly under ALLOW_ANY"},
		},
		"what Istio refuses is said": {
			spec: `{"egress":[{"hosts":["short"]}]}`,
			want: []string{`spec.egress[0].hosts[0]: host "short" must be namespace/dnsName (refused by Istio's rules)`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			k := mustLookup(t, groupNetworking, "Sidecar")
			if k.Support != Partly || !k.NeedsSpec() {
				t.Fatalf("support %s, needs its spec %v; want partly, read", k.Support, k.NeedsSpec())
			}
			if got := k.Ignored(nil, spec(t, tc.spec)); !slices.Equal(got, tc.want) {
				t.Errorf("ignored\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
