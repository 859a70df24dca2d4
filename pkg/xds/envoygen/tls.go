package envoygen

import (
	"fmt"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbuffer "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The SDS secrets pilot-agent serves Envoy on its "sds-grpc" bootstrap
// cluster.
const (
	sdsCluster       = "sds-grpc"
	identitySecret   = "default"
	rootSecret       = "ROOTCA"
	tlsSocketName    = "envoy.transport_sockets.tls"
	rawSocketName    = "envoy.transport_sockets.raw_buffer"
	tlsModeMatchKey  = "tlsMode" // key of envoy.transport_socket_match metadata
	tlsModeIstio     = "istio"
	transportTLS     = "tls"
	transportRaw     = "raw_buffer"
	socketMatchIstio = "tlsMode-istio"
)

// ALPN values. A client sidecar offers mtlsClientALPN, which a PERMISSIVE
// server recognises among istioALPNs as Istio mTLS.
var (
	mtlsClientALPN   = []string{"istio-peer-exchange", "istio"}
	mtlsClientH2ALPN = []string{"istio-peer-exchange", "istio", "h2"}
	istioALPNs       = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
	istioHTTPALPNs   = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	plainHTTPALPNs   = []string{"http/1.1", "h2c"}
	serverHTTPALPNs  = []string{"h2", "http/1.1"}
	serverTCPALPNs   = []string{"istio-peer-exchange", "h2", "http/1.1"}
	serverCiphers    = []string{"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-GCM-SHA256"}
	zeroFetchTimeout = durationpb.New(0)
)

// sdsSecret refers to one of pilot-agent's SDS secrets.
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: &core.ApiConfigSource{
				ApiType:             core.ApiConfigSource_GRPC,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: sdsCluster},
				}}},
				SetNodeOnFirstMessageOnly: true,
			}},
			InitialFetchTimeout: zeroFetchTimeout,
			ResourceApiVersion:  core.ApiVersion_V3,
		},
	}
}

// mtlsCommon is the workload certificate and ROOTCA validation; sans
// match the peer's URI SANs.
func mtlsCommon(sans []*matcher.StringMatcher, alpn []string, server bool) *tlsv3.CommonTlsContext {
	var typed []*tlsv3.SubjectAltNameMatcher
	for _, m := range sans {
		typed = append(typed, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: m})
	}
	params := &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
	}
	if server {
		params.CipherSuites = serverCiphers
	}
	return &tlsv3.CommonTlsContext{
		TlsParams:                      params,
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(identitySecret)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: typed},
				ValidationContextSdsSecretConfig: sdsSecret(rootSecret),
			},
		},
		AlpnProtocols: alpn,
	}
}

// upstreamMTLS is Istio mTLS toward a sidecar whose identity is one of
// sans; h2 offers HTTP/2 besides Istio's ALPN.
func upstreamMTLS(sans []string, sni string, h2 bool) (*core.TransportSocket, error) {
	ms := make([]*matcher.StringMatcher, 0, len(sans))
	for _, s := range sans {
		ms = append(ms, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}})
	}
	alpn := mtlsClientALPN
	if h2 {
		alpn = mtlsClientH2ALPN
	}
	return transportSocket(tlsSocketName, &tlsv3.UpstreamTlsContext{
		CommonTlsContext: mtlsCommon(ms, alpn, false),
		Sni:              sni,
	})
}

// downstreamMTLS terminates Istio mTLS: a client certificate is required
// and must chain to ROOTCA and name an identity of the trust domain;
// which identity may call is AuthorizationPolicy's decision.
func (b *builder) downstreamMTLS(alpn []string) (*core.TransportSocket, error) {
	prefix := &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "spiffe://" + b.g.TrustDomain.Name() + "/"}}
	return transportSocket(tlsSocketName, &tlsv3.DownstreamTlsContext{
		CommonTlsContext:         mtlsCommon([]*matcher.StringMatcher{prefix}, alpn, true),
		RequireClientCertificate: wrapperspb.Bool(true),
	})
}

func rawBufferSocket() (*core.TransportSocket, error) {
	return transportSocket(rawSocketName, &rawbuffer.RawBuffer{})
}

func transportSocket(name string, m proto.Message) (*core.TransportSocket, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("transport socket: %w", err)
	}
	return &core.TransportSocket{Name: name, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}

// sni is Istio's SNI toward a cluster: outbound_.<port>_.<subset>_.<host>.
func sni(host, subset string, port uint32) string {
	return fmt.Sprintf("outbound_.%d_.%s_.%s", port, subset, host)
}

var connectTimeout = durationpb.New(10 * time.Second)
