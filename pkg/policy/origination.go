package policy

import (
	"errors"
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// OriginationOptions are the choices of istiod's operator that the rule
// for a DestinationRule's SIMPLE and MUTUAL TLS follows.
type OriginationOptions struct {
	// AllowInsecureSkipVerify lets SIMPLE or MUTUAL TLS skip verifying
	// the server (--allow-insecure-skip-verify).
	AllowInsecureSkipVerify bool
}

// Reasons a DestinationRule's SIMPLE or MUTUAL TLS is refused; the
// generators then give the cluster no endpoints, so nothing is sent in
// plaintext or to an unverified server, and the webhook refuses the rule.
// (Istio honours insecureSkipVerify, and sends plaintext where MUTUAL
// lacks a client certificate or a credentialName rule lacks a
// workloadSelector.)
var (
	ErrInsecureSkipVerify = errors.New("insecureSkipVerify is not allowed by this istiod (--allow-insecure-skip-verify)")
	ErrInsecureVerifying  = errors.New("insecureSkipVerify cannot be true with caCertificates or subjectAltNames, nor in SIMPLE with credentialName (Istio's validation)")
	ErrMissingClientCert  = errors.New("MUTUAL needs credentialName, or clientCertificate and privateKey")
	ErrForeignCredential  = errors.New("credentialName applies to a sidecar only in a rule with a workloadSelector")
	ErrCredentialName     = errors.New("credentialName must be a plain Secret name, of the client's namespace")
	ErrFilePath           = errors.New("file paths must not contain '~', which separates them in SDS names")
	errNotOrigination     = errors.New("not a SIMPLE or MUTUAL rule")
)

// sdsFileSeparator separates file paths in the SDS resource names of
// files pilot-agent serves.
const sdsFileSeparator = "~"

// Originates reports whether s originates TLS of the rule's own (SIMPLE
// or MUTUAL), which CheckOrigination judges.
func Originates(s *networking.ClientTLSSettings) bool {
	m := s.GetMode()
	return m == networking.ClientTLSSettings_SIMPLE || m == networking.ClientTLSSettings_MUTUAL
}

// CheckOrigination reports why a DestinationRule's SIMPLE or MUTUAL TLS
// settings cannot be applied as written whoever the client is, or nil.
// Whether a credentialName may be read for a client is
// CheckOriginationFor's.
func CheckOrigination(s *networking.ClientTLSSettings, opts OriginationOptions) error {
	if !Originates(s) {
		return errNotOrigination
	}
	if insecure := s.GetInsecureSkipVerify().GetValue(); insecure && !opts.AllowInsecureSkipVerify {
		return ErrInsecureSkipVerify
	} else if insecure && (s.GetCaCertificates() != "" || len(s.GetSubjectAltNames()) > 0 ||
		(s.GetMode() == networking.ClientTLSSettings_SIMPLE && s.GetCredentialName() != "")) {
		return ErrInsecureVerifying
	}
	if name := s.GetCredentialName(); name != "" {
		if strings.ContainsAny(name, "/:") {
			return fmt.Errorf("%w: %s", ErrCredentialName, quote(name))
		}
		return nil
	}
	mutual := s.GetMode() == networking.ClientTLSSettings_MUTUAL
	if mutual && (s.GetClientCertificate() == "" || s.GetPrivateKey() == "") {
		return ErrMissingClientCert
	}
	for _, p := range []string{s.GetClientCertificate(), s.GetPrivateKey(), s.GetCaCertificates(), s.GetCaCrl()} {
		if strings.Contains(p, sdsFileSeparator) {
			return fmt.Errorf("%w: %s", ErrFilePath, quote(p))
		}
	}
	return nil
}

// RuleScope is what of a DestinationRule decides which clients it
// reaches.
type RuleScope struct {
	Namespace string
	// Selected is whether the rule has a workloadSelector: it then
	// reaches only the matching workloads of its own namespace.
	Selected bool
}

// CheckOriginationFor is CheckOrigination for a client of
// clientNamespace under a rule of scope. A Secret is read with the
// client's identity in the client's namespace: as in Istio, only a rule
// that selects its workloads, which are of its own namespace, may name
// one, so that a rule of another namespace, or for a whole namespace,
// does not make every client ask for a Secret of its own namespace.
func CheckOriginationFor(s *networking.ClientTLSSettings, opts OriginationOptions, scope RuleScope, clientNamespace string) error {
	if err := CheckOrigination(s, opts); err != nil {
		return err
	}
	if s.GetCredentialName() != "" && (!scope.Selected || scope.Namespace != clientNamespace) {
		return ErrForeignCredential
	}
	return nil
}

// OriginationProblem is one SIMPLE or MUTUAL TLS setting of a
// DestinationRule that is refused for the clients it reaches, or that
// does not verify the server.
type OriginationProblem struct {
	// Where is the setting: "trafficPolicy", "trafficPolicy port 443",
	// "subset v1", "subset v1 port 443".
	Where string
	// Path is the setting's field path, for admission.
	Path string
	// Err is why the setting is refused (its clusters get no endpoints);
	// nil when it is applied without verifying the server.
	Err error
}

// OriginationProblems are the problems of each SIMPLE or MUTUAL TLS
// setting of dr, a rule of scope, judged by CheckOriginationFor for the
// clients the rule reaches: with a workloadSelector those of its own
// namespace, without one those of any namespace.
func OriginationProblems(scope RuleScope, dr *networking.DestinationRule, opts OriginationOptions) []OriginationProblem {
	// A client the rule reaches: of its own namespace when it selects
	// workloads; any other namespace stands for the clients of one
	// without a selector, which Kubernetes never names with a "/".
	client := scope.Namespace
	if !scope.Selected {
		client = "/any namespace"
	}
	var out []OriginationProblem
	check := func(where, path string, s *networking.ClientTLSSettings) {
		if !Originates(s) {
			return
		}
		err := CheckOriginationFor(s, opts, scope, client)
		if err != nil || s.GetInsecureSkipVerify().GetValue() {
			out = append(out, OriginationProblem{Where: where, Path: path, Err: err})
		}
	}
	policy := func(where, path string, tp *networking.TrafficPolicy) {
		check(where, path+".tls", tp.GetTls())
		for i, pl := range tp.GetPortLevelSettings() {
			check(fmt.Sprintf("%s port %d", where, pl.GetPort().GetNumber()), at(path+".portLevelSettings", i)+".tls", pl.GetTls())
		}
	}
	policy("trafficPolicy", "spec.trafficPolicy", dr.GetTrafficPolicy())
	for i, ss := range dr.GetSubsets() {
		policy("subset "+ss.GetName(), at("spec.subsets", i)+".trafficPolicy", ss.GetTrafficPolicy())
	}
	return out
}
