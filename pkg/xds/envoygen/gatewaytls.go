package envoygen

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
)

// Reasons a terminating server's TLS is not served.
var (
	errNoCertificate   = errors.New(ProblemInvalid + ": SIMPLE, MUTUAL and OPTIONAL_MUTUAL need credentialName(s), serverCertificate and privateKey, or tlsCertificates")
	errIstioMutualCert = errors.New(ProblemInvalid + ": ISTIO_MUTUAL takes no credentialName or certificates")
	errTooManyCerts    = errors.New(ProblemInvalid + ": at most 2 credentialNames or tlsCertificates")
	errCredentialKind  = errors.New(ProblemUnsupported + ": credentialName must name a Secret (<name> or kubernetes://<name>)")
	errServerInsecure  = errors.New(ProblemRefused + ": insecureSkipVerify is not allowed by this istiod (--allow-insecure-skip-verify)")
	errServerFilePath  = errors.New(ProblemInvalid + ": file paths must not contain '~', which separates them in SDS names")
)

// checkServerTLS reports why a terminating server's TLS settings cannot
// be served as written, or nil.
func checkServerTLS(s *networkingv1.ServerTLSSettings, m Mesh) error {
	creds := s.GetCredentialNames()
	if s.GetCredentialName() != "" {
		creds = append(slices.Clip(creds), s.GetCredentialName())
	}
	files := s.GetServerCertificate() != "" || s.GetPrivateKey() != "" || len(s.GetTlsCertificates()) > 0
	if s.GetMode() == networkingv1.ServerTLSSettings_ISTIO_MUTUAL {
		if len(creds) > 0 || files || s.GetCaCertCredentialName() != "" {
			return errIstioMutualCert
		}
	} else {
		if len(creds) == 0 && !(s.GetServerCertificate() != "" && s.GetPrivateKey() != "") && len(s.GetTlsCertificates()) == 0 {
			return errNoCertificate
		}
		if len(s.GetCredentialNames()) > 2 || len(s.GetTlsCertificates()) > 2 {
			return errTooManyCerts
		}
	}
	for _, c := range append(creds, s.GetCaCertCredentialName()) {
		if scheme, _, ok := strings.Cut(c, "://"); ok && scheme+"://" != credentialPrefix {
			return fmt.Errorf("%w: %q", errCredentialKind, truncateName(c))
		}
	}
	paths := []string{s.GetServerCertificate(), s.GetPrivateKey(), s.GetCaCertificates(), s.GetCaCrl()}
	for _, c := range s.GetTlsCertificates() {
		paths = append(paths, c.GetServerCertificate(), c.GetPrivateKey())
	}
	for _, p := range paths {
		if strings.Contains(p, fileSeparator) {
			return fmt.Errorf("%w: %q", errServerFilePath, truncateName(p))
		}
	}
	if s.GetInsecureSkipVerify().GetValue() && !m.AllowInsecureSkipVerify {
		return errServerInsecure
	}
	return nil
}

// credentialResource is the SDS name of a credentialName: a Secret of the
// router's own namespace that istiod serves over ADS.
func credentialResource(name string) string {
	if strings.HasPrefix(name, credentialPrefix) {
		return name
	}
	return credentialPrefix + name
}

// gatewayTLSContext is the DownstreamTlsContext of a terminating server
// (checked by checkServerTLS), as Istio's BuildListenerTLSContext makes it
// for a gateway: the certificate from the credentialName Secrets (over
// ADS), from files pilot-agent serves ("file-cert:", "file-root:"), or
// for ISTIO_MUTUAL the router's workload identity; client certificates
// required for MUTUAL and ISTIO_MUTUAL, verified when presented for
// OPTIONAL_MUTUAL; then for SIMPLE, MUTUAL and OPTIONAL_MUTUAL the mesh's
// tlsDefaults and the server's own protocol versions and ciphers. tcp is
// a TLS server that is not HTTPS.
func gatewayTLSContext(s *networkingv1.ServerTLSSettings, tcp bool, d TLSDefaults) *tlsv3.DownstreamTlsContext {
	mode := s.GetMode()
	alpn := serverHTTPALPNs
	if mode == networkingv1.ServerTLSSettings_ISTIO_MUTUAL && tcp {
		alpn = serverTCPALPNs
	}
	common := &tlsv3.CommonTlsContext{AlpnProtocols: slices.Clone(alpn)}
	require := mode == networkingv1.ServerTLSSettings_MUTUAL || mode == networkingv1.ServerTLSSettings_ISTIO_MUTUAL
	validate := require || mode == networkingv1.ServerTLSSettings_OPTIONAL_MUTUAL
	insecure := s.GetInsecureSkipVerify().GetValue()
	creds := s.GetCredentialNames()
	if len(creds) == 0 && s.GetCredentialName() != "" {
		creds = []string{s.GetCredentialName()}
	}
	switch {
	case mode == networkingv1.ServerTLSSettings_ISTIO_MUTUAL:
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(identitySecret)}
		common.ValidationContextType = fileValidation(s.GetSubjectAltNames(), s.GetCaCrl(), insecure, rootSecret)
	case len(creds) > 0:
		for _, c := range creds {
			common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, adsSecret(credentialResource(c)))
		}
		ca := creds[0] + credentialCASuffix
		if s.GetCaCertCredentialName() != "" {
			ca = s.GetCaCertCredentialName()
		}
		if validate {
			def := &tlsv3.CertificateValidationContext{
				MatchSubjectAltNames:  exactMatchers(s.GetSubjectAltNames()),
				VerifyCertificateSpki: s.GetVerifyCertificateSpki(),
				VerifyCertificateHash: s.GetVerifyCertificateHash(),
			}
			if insecure {
				def.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
			}
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         def,
					ValidationContextSdsSecretConfig: adsSecret(credentialResource(ca)),
				},
			}
		} else if len(s.GetSubjectAltNames()) > 0 {
			common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(s.GetSubjectAltNames())},
			}
		}
	default:
		certs := s.GetTlsCertificates()
		if len(certs) == 0 {
			certs = []*networkingv1.ServerTLSSettings_TLSCertificate{{ServerCertificate: s.GetServerCertificate(), PrivateKey: s.GetPrivateKey()}}
		}
		for _, c := range certs {
			common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, fileCertSecret(c.GetServerCertificate(), c.GetPrivateKey()))
		}
		if validate {
			root := rootSecret
			if s.GetCaCertificates() != "" {
				root = fileRootPrefix + s.GetCaCertificates()
			}
			common.ValidationContextType = fileValidation(s.GetSubjectAltNames(), s.GetCaCrl(), insecure, root)
		}
	}
	if mode != networkingv1.ServerTLSSettings_ISTIO_MUTUAL {
		applyServerTLSParams(common, s, d)
	}
	return &tlsv3.DownstreamTlsContext{CommonTlsContext: common, RequireClientCertificate: wrapperspb.Bool(require)}
}

// fileValidation validates client certificates against the root secret
// root that pilot-agent serves (ROOTCA, or "file-root:<path>").
func fileValidation(sans []string, crl string, insecure bool, root string) *tlsv3.CommonTlsContext_CombinedValidationContext {
	def := &tlsv3.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(sans)}
	if crl != "" {
		def.Crl = &core.DataSource{Specifier: &core.DataSource_Filename{Filename: crl}}
	}
	if insecure {
		def.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
	}
	secret := sdsSecret(root)
	if root != rootSecret {
		secret = fileSecret(root)
	}
	return &tlsv3.CommonTlsContext_CombinedValidationContext{
		CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         def,
			ValidationContextSdsSecretConfig: secret,
		},
	}
}

// fileCertSecret is the certificate pilot-agent reads from files, or the
// workload identity when they are not both named.
func fileCertSecret(cert, key string) *tlsv3.SdsSecretConfig {
	if cert == "" || key == "" {
		return sdsSecret(identitySecret)
	}
	return fileSecret(fileCertPrefix + cert + fileSeparator + key)
}

func exactMatchers(values []string) []*matcher.StringMatcher {
	var out []*matcher.StringMatcher
	for _, v := range values {
		out = append(out, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v}})
	}
	return out
}

// applyServerTLSParams applies the mesh's tlsDefaults, then the server's
// own settings; ciphers Envoy does not know are left out, as Istio
// filters them.
func applyServerTLSParams(common *tlsv3.CommonTlsContext, s *networkingv1.ServerTLSSettings, d TLSDefaults) {
	params := func() *tlsv3.TlsParameters {
		if common.TlsParams == nil {
			common.TlsParams = &tlsv3.TlsParameters{}
		}
		return common.TlsParams
	}
	if len(d.ECDHCurves) > 0 {
		params().EcdhCurves = slices.Clone(d.ECDHCurves)
	}
	if len(d.CipherSuites) > 0 {
		params().CipherSuites = slices.Clone(d.CipherSuites)
	}
	if d.MinProtocolVersion != tlsv3.TlsParameters_TLS_AUTO {
		params().TlsMinimumProtocolVersion = d.MinProtocolVersion
	}
	if v := tlsProtocol(s.GetMinProtocolVersion()); v != tlsv3.TlsParameters_TLS_AUTO {
		params().TlsMinimumProtocolVersion = v
	}
	if ciphers := knownCiphers(s.GetCipherSuites()); len(ciphers) > 0 {
		params().CipherSuites = ciphers
	}
	if v := tlsProtocol(s.GetMaxProtocolVersion()); v != tlsv3.TlsParameters_TLS_AUTO {
		params().TlsMaximumProtocolVersion = v
	}
}

// tlsProtocol maps a server's TLS version onto Envoy's: the enums
// number the versions alike.
func tlsProtocol(v networkingv1.ServerTLSSettings_TLSProtocol) tlsv3.TlsParameters_TlsProtocol {
	out := tlsv3.TlsParameters_TlsProtocol(v)
	if out < tlsv3.TlsParameters_TLS_AUTO || out > tlsv3.TlsParameters_TLSv1_3 {
		return tlsv3.TlsParameters_TLS_AUTO
	}
	return out
}

// envoyCiphers are the cipher suites a Gateway may name, as BoringSSL
// names them (Istio's ValidCipherSuites).
var envoyCiphers = map[string]bool{
	"ECDHE-ECDSA-AES128-GCM-SHA256": true, "ECDHE-RSA-AES128-GCM-SHA256": true,
	"ECDHE-ECDSA-AES256-GCM-SHA384": true, "ECDHE-RSA-AES256-GCM-SHA384": true,
	"ECDHE-ECDSA-CHACHA20-POLY1305": true, "ECDHE-RSA-CHACHA20-POLY1305": true,
	"ECDHE-ECDSA-AES128-SHA": true, "ECDHE-RSA-AES128-SHA": true,
	"ECDHE-ECDSA-AES256-SHA": true, "ECDHE-RSA-AES256-SHA": true,
	"AES128-GCM-SHA256": true, "AES256-GCM-SHA384": true,
	"AES128-SHA": true, "AES256-SHA": true, "DES-CBC3-SHA": true,
}

// knownCiphers is suites without duplicates and without names Envoy
// would refuse; an expression (starting with neither letter nor digit,
// such as "[A|B]" or "-X") passes through, as in Istio.
func knownCiphers(suites []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range suites {
		ok := c == "" || c == "ALL" || envoyCiphers[c] || !(c[0] >= 'A' && c[0] <= 'Z' || c[0] >= 'a' && c[0] <= 'z' || c[0] >= '0' && c[0] <= '9')
		if ok && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}
