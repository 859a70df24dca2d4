package policy

import (
	"slices"
	"strings"
	"unicode"

	networking "istio.io/api/networking/v1alpha3"
)

// cipherSuites are the suites Envoy (BoringSSL) accepts in a server's
// cipherSuites, as Istio lists them.
var cipherSuites = set(
	"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
	"ECDHE-ECDSA-AES128-SHA", "ECDHE-RSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-RSA-AES256-SHA",
	"AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA", "AES256-SHA", "DES-CBC3-SHA",
)

// validCipherSuite: a known suite, "ALL", or an expression Envoy reads
// (one led by an operator such as "-" or "+"), as Istio allows.
func validCipherSuite(cs string) bool {
	if cs == "" || cs == "ALL" {
		return true
	}
	if r := rune(cs[0]); !unicode.IsLetter(r) && !unicode.IsNumber(r) {
		return true
	}
	return cipherSuites[cs]
}

// checkServerTLS checks a server's TLS settings as Istio's
// validateTLSOptions does.
func checkServerTLS(f *Findings, p string, tls *networking.ServerTLSSettings) {
	if tls == nil {
		return
	}
	mode := tls.GetMode()
	if _, ok := networking.ServerTLSSettings_TLSmode_name[int32(mode)]; !ok {
		f.errorf(p+".mode", "%d is not a TLS mode", int32(mode))
		return
	}
	if v := tls.GetMinProtocolVersion(); (v == networking.ServerTLSSettings_TLSV1_0 || v == networking.ServerTLSSettings_TLSV1_1) &&
		len(tls.GetCipherSuites()) == 0 {
		f.warnf(p+".minProtocolVersion", "TLS versions below 1.2 need cipherSuites set: the default suites do not include theirs")
	}
	var invalid, dup []string
	seen := map[string]bool{}
	for _, cs := range tls.GetCipherSuites() {
		switch {
		case !validCipherSuite(cs):
			invalid = append(invalid, cs)
		case seen[cs]:
			dup = append(dup, cs)
		}
		seen[cs] = true
	}
	if len(invalid) > 0 {
		slices.Sort(invalid)
		f.warnf(p+".cipherSuites", "unknown suites ignored: %s", truncate(strings.Join(slices.Compact(invalid), ", ")))
	}
	if len(dup) > 0 {
		slices.Sort(dup)
		f.warnf(p+".cipherSuites", "duplicate suites ignored: %s", truncate(strings.Join(slices.Compact(dup), ", ")))
	}

	if mode == networking.ServerTLSSettings_ISTIO_MUTUAL {
		// The workload certificate of the gateway: no other may be named.
		for _, c := range []struct {
			field string
			set   bool
		}{
			{"serverCertificate", tls.GetServerCertificate() != ""}, {"privateKey", tls.GetPrivateKey() != ""},
			{"caCertificates", tls.GetCaCertificates() != ""}, {"tlsCertificates", len(tls.GetTlsCertificates()) > 0},
			{"credentialName", tls.GetCredentialName() != ""}, {"credentialNames", len(tls.GetCredentialNames()) > 0},
		} {
			if c.set {
				f.errorf(p+"."+c.field, "cannot be set with mode ISTIO_MUTUAL, which uses the gateway's workload certificate")
			}
		}
		return
	}
	if passthrough(mode) && (tls.GetCaCrl() != "" || tls.GetServerCertificate() != "" || tls.GetPrivateKey() != "" ||
		tls.GetCaCertificates() != "" || len(tls.GetTlsCertificates()) > 0 || tls.GetCredentialName() != "" ||
		len(tls.GetCredentialNames()) > 0) {
		f.warnf(p, "mode %s uses no certificate: those given are ignored", mode)
	}

	sources := 0
	if tls.GetServerCertificate() != "" && tls.GetPrivateKey() != "" {
		sources++
	}
	if tls.GetCredentialName() != "" {
		sources++
	}
	if len(tls.GetCredentialNames()) > 0 {
		sources++
	}
	if len(tls.GetTlsCertificates()) > 0 {
		sources++
	}
	if sources > 1 {
		f.errorf(p, "only one of credentialName, credentialNames, serverCertificate/privateKey and tlsCertificates may be set")
	}

	terminates := mode == networking.ServerTLSSettings_SIMPLE || mode == networking.ServerTLSSettings_MUTUAL ||
		mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	byCredential := tls.GetCredentialName() != "" || len(tls.GetCredentialNames()) > 0
	if terminates && byCredential {
		// Stricter than Istio, which skips the CRL rule here: a caCrl file
		// beside a credentialName is not read (the CRL comes from the
		// Secret), and a revocation list silently ignored is refused.
		if tls.GetCaCrl() != "" {
			f.errorf(p+".caCrl", "cannot be set with credentialName(s): the CRL must be in the Secret")
		}
		return
	}
	if terminates {
		prefix := "SIMPLE TLS"
		if mode != networking.ServerTLSSettings_SIMPLE {
			prefix = "MUTUAL TLS"
			if tls.GetCaCertificates() == "" {
				f.errorf(p+".caCertificates", "%s needs a client CA bundle", prefix)
			}
		}
		certs := tls.GetTlsCertificates()
		if len(certs) > 2 {
			f.warnf(p+".tlsCertificates", "%s serves at most 2 certificates", prefix)
		}
		if len(certs) == 0 {
			certs = []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: tls.GetServerCertificate(), PrivateKey: tls.GetPrivateKey()}}
		}
		for _, c := range certs {
			if c.GetServerCertificate() == "" {
				f.errorf(p, "%s needs a server certificate", prefix)
			}
			if c.GetPrivateKey() == "" {
				f.errorf(p, "%s needs a private key", prefix)
			}
		}
	}
	if tls.GetCaCrl() != "" {
		if tls.GetCredentialName() != "" {
			f.errorf(p+".caCrl", "cannot be set with credentialName: the CRL must be in the Secret")
		}
		if mode == networking.ServerTLSSettings_SIMPLE {
			f.errorf(p+".caCrl", "cannot be used with mode SIMPLE")
		}
	}
}
