package envoygen

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/prototext"
	networkingv1 "istio.io/api/networking/v1"
)

// tlsSummary is what a DownstreamTlsContext decides, field by field.
type tlsSummary struct {
	certs      []string // SDS names, "ads:" for those over ADS
	validation string   // SDS name of the CA, "" for none
	require    bool
	sans       []string
	spki, hash []string
	alpn       []string
	min, max   tlsv3.TlsParameters_TlsProtocol
	ciphers    []string
	curves     []string
}

func sdsName(s *tlsv3.SdsSecretConfig) string {
	if s == nil {
		return ""
	}
	if s.GetSdsConfig().GetAds() != nil {
		return "ads:" + s.GetName()
	}
	if s.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != sdsCluster {
		return "?:" + s.GetName()
	}
	return s.GetName()
}

func summarize(ctx *tlsv3.DownstreamTlsContext) tlsSummary {
	common := ctx.GetCommonTlsContext()
	s := tlsSummary{require: ctx.GetRequireClientCertificate().GetValue(), alpn: common.GetAlpnProtocols()}
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		s.certs = append(s.certs, sdsName(c))
	}
	def := common.GetCombinedValidationContext().GetDefaultValidationContext()
	if def == nil {
		def = common.GetValidationContext()
	}
	s.validation = sdsName(common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig())
	for _, m := range def.GetMatchSubjectAltNames() {
		s.sans = append(s.sans, m.GetExact())
	}
	s.spki, s.hash = def.GetVerifyCertificateSpki(), def.GetVerifyCertificateHash()
	p := common.GetTlsParams()
	s.min, s.max, s.ciphers, s.curves = p.GetTlsMinimumProtocolVersion(), p.GetTlsMaximumProtocolVersion(), p.GetCipherSuites(), p.GetEcdhCurves()
	return s
}

// A SHA-256 SPKI pin (base64) and certificate hash (hex).
const (
	spki = "NvqYIYSbgK2vCJpQhObf77vv+bQWtc5ek5RIOwPiC9A="
	hash = "df6ff72fe9116521268f6f2dd4966f51df479883fe7037b39f75916ac3049d1a"
)

func TestGatewayTLSContextPerMode(t *testing.T) {
	h2 := []string{"h2", "http/1.1"}
	defaults := TLSDefaults{ECDHCurves: []string{"P-256"}, CipherSuites: []string{"ECDHE-RSA-AES128-GCM-SHA256"}, MinProtocolVersion: tlsv3.TlsParameters_TLSv1_2}
	for name, tc := range map[string]struct {
		tls  *networkingv1.ServerTLSSettings
		tcp  bool
		want tlsSummary
	}{
		"SIMPLE with credentialName: the Secret over ADS, mesh defaults": {
			tls:  &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: "cert"},
			want: tlsSummary{certs: []string{"ads:kubernetes://cert"}, alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
		"SIMPLE with two credentialNames and the server's versions and ciphers": {
			tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialNames: []string{"rsa", "kubernetes://ecdsa"},
				MinProtocolVersion: networkingv1.ServerTLSSettings_TLSV1_3, MaxProtocolVersion: networkingv1.ServerTLSSettings_TLSV1_3,
				CipherSuites: []string{"ECDHE-ECDSA-AES256-GCM-SHA384", "NOT-A-CIPHER", "ECDHE-ECDSA-AES256-GCM-SHA384"}},
			want: tlsSummary{certs: []string{"ads:kubernetes://rsa", "ads:kubernetes://ecdsa"}, alpn: h2, min: tlsv3.TlsParameters_TLSv1_3, max: tlsv3.TlsParameters_TLSv1_3,
				ciphers: []string{"ECDHE-ECDSA-AES256-GCM-SHA384"}, curves: defaults.ECDHCurves},
		},
		"SIMPLE with subjectAltNames: a plain validation context": {
			tls:  &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: "cert", SubjectAltNames: []string{"client"}},
			want: tlsSummary{certs: []string{"ads:kubernetes://cert"}, sans: []string{"client"}, alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
		"MUTUAL: client certificate required, verified against <name>-cacert": {
			tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_MUTUAL, CredentialName: "cert", SubjectAltNames: []string{"spiffe://x/client"},
				VerifyCertificateSpki: []string{spki}, VerifyCertificateHash: []string{hash}},
			want: tlsSummary{certs: []string{"ads:kubernetes://cert"}, validation: "ads:kubernetes://cert-cacert", require: true, sans: []string{"spiffe://x/client"},
				spki: []string{spki}, hash: []string{hash}, alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
		"OPTIONAL_MUTUAL: verified when presented; caCertCredentialName": {
			tls:  &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_OPTIONAL_MUTUAL, CredentialNames: []string{"a", "b"}, CaCertCredentialName: "ca"},
			want: tlsSummary{certs: []string{"ads:kubernetes://a", "ads:kubernetes://b"}, validation: "ads:kubernetes://ca", alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
		"ISTIO_MUTUAL: the router's workload identity, ROOTCA, no mesh defaults": {
			tls:  &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_ISTIO_MUTUAL, SubjectAltNames: []string{"spiffe://cluster.local/ns/a/sa/b"}},
			want: tlsSummary{certs: []string{"default"}, validation: "ROOTCA", require: true, sans: []string{"spiffe://cluster.local/ns/a/sa/b"}, alpn: h2},
		},
		"ISTIO_MUTUAL for TCP: Istio's peer exchange ALPN": {
			tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_ISTIO_MUTUAL}, tcp: true,
			want: tlsSummary{certs: []string{"default"}, validation: "ROOTCA", require: true, alpn: serverTCPALPNs},
		},
		"files: pilot-agent's file-cert and file-root": {
			tls:  &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_MUTUAL, ServerCertificate: "/etc/c.pem", PrivateKey: "/etc/k.pem", CaCertificates: "/etc/ca.pem"},
			want: tlsSummary{certs: []string{"file-cert:/etc/c.pem~/etc/k.pem"}, validation: "file-root:/etc/ca.pem", require: true, alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
		"tlsCertificates: one file-cert each": {
			tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, TlsCertificates: []*networkingv1.ServerTLSSettings_TLSCertificate{
				{ServerCertificate: "/a.pem", PrivateKey: "/a.key"}, {ServerCertificate: "/b.pem", PrivateKey: "/b.key"}}},
			want: tlsSummary{certs: []string{"file-cert:/a.pem~/a.key", "file-cert:/b.pem~/b.key"}, alpn: h2, min: tlsv3.TlsParameters_TLSv1_2, ciphers: defaults.CipherSuites, curves: defaults.ECDHCurves},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := checkServerTLS(tc.tls, Mesh{}); err != nil {
				t.Fatalf("checkServerTLS: %v", err)
			}
			ctx := gatewayTLSContext(tc.tls, tc.tcp, defaults)
			if err := ctx.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			got := summarize(ctx)
			if !equalSummary(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v\n%s", got, tc.want, prototext.Format(ctx))
			}
		})
	}
}

func equalSummary(a, b tlsSummary) bool {
	return slices.Equal(a.certs, b.certs) && a.validation == b.validation && a.require == b.require && slices.Equal(a.sans, b.sans) &&
		slices.Equal(a.spki, b.spki) && slices.Equal(a.hash, b.hash) && slices.Equal(a.alpn, b.alpn) && a.min == b.min && a.max == b.max &&
		slices.Equal(a.ciphers, b.ciphers) && slices.Equal(a.curves, b.curves)
}
