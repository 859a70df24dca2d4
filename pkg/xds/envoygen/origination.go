package envoygen

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// SDS resource names of TLS origination, as Istio names them: Kubernetes
// Secrets that istiod serves over ADS, and files that pilot-agent reads
// and serves on "sds-grpc".
const (
	credentialPrefix   = "kubernetes://"
	credentialCASuffix = "-cacert"
	fileCertPrefix     = "file-cert:"
	fileRootPrefix     = "file-root:"
	fileSeparator      = "~"
	// systemRoots is the CA pilot-agent reads from the OS trust store,
	// used when a rule names no caCertificates.
	systemRoots = "system"
)

// originationProblem is why oc's SIMPLE or MUTUAL settings s cannot be
// applied for this proxy, or nil: package policy's rule
// (policy.CheckOriginationFor), which the webhook and the problem log
// follow too.
func (b *builder) originationProblem(oc outboundCluster, s *networkingv1.ClientTLSSettings) error {
	var scope policy.RuleScope
	if oc.dr != nil {
		scope = policy.RuleScope{Namespace: oc.dr.Namespace, Selected: oc.dr.Spec.GetWorkloadSelector() != nil}
	}
	return policy.CheckOriginationFor(s, policy.OriginationOptions{AllowInsecureSkipVerify: b.g.Mesh.AllowInsecureSkipVerify},
		scope, b.p.Namespace)
}

// originationContext is the UpstreamTlsContext of a DestinationRule's
// SIMPLE or MUTUAL settings, as Istio's constructUpstreamTLS builds it for
// a sidecar; s has passed originationProblem.
func originationContext(s *networkingv1.ClientTLSSettings, h2 bool, defaults TLSDefaults) *tlsv3.UpstreamTlsContext {
	common := &tlsv3.CommonTlsContext{TlsParams: &tlsv3.TlsParameters{
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		EcdhCurves:                defaults.ECDHCurves,
		CipherSuites:              defaults.CipherSuites,
	}}
	mutual := s.GetMode() == networkingv1.ClientTLSSettings_MUTUAL
	insecure := s.GetInsecureSkipVerify().GetValue()
	// Envoy's match_subject_alt_names matches any SAN type, as Istio
	// uses it: external servers present DNS names more often than URIs.
	var sans []*matcher.StringMatcher
	for _, san := range s.GetSubjectAltNames() {
		sans = append(sans, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: san}})
	}
	if name := s.GetCredentialName(); name != "" {
		if mutual {
			common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{adsSecret(credentialPrefix + name)}
		}
		if !insecure {
			common.ValidationContextType = combinedValidation(&tlsv3.CertificateValidationContext{MatchSubjectAltNames: sans},
				adsSecret(credentialPrefix+name+credentialCASuffix))
		}
	} else {
		if mutual {
			common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{
				fileSecret(fileCertPrefix + s.GetClientCertificate() + fileSeparator + s.GetPrivateKey()),
			}
		}
		if insecure {
			common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{}
		} else {
			ca := s.GetCaCertificates()
			if ca == "" {
				ca = systemRoots
			}
			def := &tlsv3.CertificateValidationContext{MatchSubjectAltNames: sans}
			if crl := s.GetCaCrl(); crl != "" {
				def.Crl = &core.DataSource{Specifier: &core.DataSource_Filename{Filename: crl}}
			}
			common.ValidationContextType = combinedValidation(def, fileSecret(fileRootPrefix+ca))
		}
	}
	if h2 {
		common.AlpnProtocols = []string{"h2"}
	}
	return &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: s.GetSni()}
}

func combinedValidation(def *tlsv3.CertificateValidationContext, sds *tlsv3.SdsSecretConfig) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext: def, ValidationContextSdsSecretConfig: sds,
	}}
}

// adsSecret is a credentialName secret, which istiod serves over ADS
// (pilot-agent forwards the request). No initial fetch timeout of zero: a
// Secret that is missing or refused must not keep the cluster warming.
func adsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}}
}

// fileSecret is a file pilot-agent reads and serves on "sds-grpc".
func fileSecret(name string) *tlsv3.SdsSecretConfig {
	s := sdsSecret(name)
	s.SdsConfig.InitialFetchTimeout = nil
	return s
}

// autoSNI is what Istio sets when the rule names no SNI: Envoy takes the
// SNI from the request's Host and, without SANs to match and unless
// verification is skipped, checks the server's certificate against it.
func autoSNI(s *networkingv1.ClientTLSSettings) *core.UpstreamHttpProtocolOptions {
	if s.GetSni() != "" {
		return nil
	}
	return &core.UpstreamHttpProtocolOptions{
		AutoSni:           true,
		AutoSanValidation: len(s.GetSubjectAltNames()) == 0 && !s.GetInsecureSkipVerify().GetValue(),
	}
}

// originationCluster encodes oc with the rule's TLS settings s toward its
// endpoints, as an EDS cluster or, for a headless service, ORIGINAL_DST.
func (b *builder) originationCluster(oc outboundCluster, s *networkingv1.ClientTLSSettings, upstream upstreamProtocol) ([]byte, error) {
	c, err := outboundShape(upstream, oc.connectionPool())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
	}
	c.Name = oc.name
	c.EdsClusterConfig.ServiceName = oc.name
	if oc.headless() {
		b.asPassthrough(c, oc, tlsOriginate)
	}
	ctx := originationContext(s, upstream == upstreamH2, b.g.Mesh.TLSDefaults)
	if c.TransportSocket, err = transportSocket(tlsSocketName, ctx); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
	}
	if auto := autoSNI(s); auto != nil {
		if err := setUpstreamHTTPOptions(c, auto); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
		}
	}
	if err := c.ValidateAll(); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(c)
}

// setUpstreamHTTPOptions sets auto in the cluster's HttpProtocolOptions,
// adding them (HTTP/1.1) when the cluster has none, as Istio does.
func setUpstreamHTTPOptions(c *cluster.Cluster, auto *core.UpstreamHttpProtocolOptions) error {
	opts := &httpopts.HttpProtocolOptions{}
	if a := c.TypedExtensionProtocolOptions[httpOptionsName]; a != nil {
		if err := a.UnmarshalTo(opts); err != nil {
			return fmt.Errorf("http protocol options: %w", err)
		}
	} else {
		opts.UpstreamProtocolOptions = &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}},
		}}
	}
	opts.UpstreamHttpProtocolOptions = auto
	a, err := anypb.New(opts)
	if err != nil {
		return fmt.Errorf("http protocol options: %w", err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: a}
	return nil
}
