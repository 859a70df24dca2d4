package envoygen

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
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

// upstreamMTLSSocket appends the fields of a TransportSocket: Envoy's TLS
// socket with Istio mTLS toward a sidecar whose identity is one of sans;
// h2 offers HTTP/2 besides Istio's ALPN. The SANs and SNI are the
// cluster's own; the rest of the TLS context was marshalled once.
func upstreamMTLSSocket(w wire, sans []string, sni string, h2 bool) (wire, error) {
	shapes, err := upstreamMTLSShapes()
	if err != nil {
		return nil, err
	}
	var typed, value, common, combined, def int
	w = w.str(socketName, tlsSocketName)
	w, typed = w.open(socketTypedConfig)
	w = w.str(anyTypeURL, upstreamTLSType)
	w, value = w.open(anyValue)
	w = append(w, shapes[boolIndex(h2)]...)
	w = w.str(upstreamSNI, sni)
	w, common = w.open(upstreamCommon)
	w, combined = w.open(commonCombinedValidation)
	w, def = w.open(combinedDefault)
	for _, s := range sans {
		var m, sm int
		w, m = w.open(validationTypedSANs)
		w = w.varint(sanMatcherType, uint64(tlsv3.SubjectAltNameMatcher_URI))
		w, sm = w.open(sanMatcherMatcher)
		w = w.str(stringMatcherExact, s).close(sm).close(m)
	}
	return w.close(def).close(combined).close(common).close(value).close(typed), nil
}

// upstreamMTLSSize bounds what upstreamMTLSSocket appends.
func upstreamMTLSSize(sans []string, sni string) int {
	n := 256 + len(sni)
	for _, s := range sans {
		n += len(s) + 16
	}
	return n
}

// Field numbers of the TLS messages encoded directly.
const (
	upstreamCommon           = 1  // UpstreamTlsContext.common_tls_context
	upstreamSNI              = 2  // UpstreamTlsContext.sni
	commonCombinedValidation = 8  // CommonTlsContext.combined_validation_context
	combinedDefault          = 1  // CombinedCertificateValidationContext.default_validation_context
	validationTypedSANs      = 15 // CertificateValidationContext.match_typed_subject_alt_names
	sanMatcherType           = 1  // SubjectAltNameMatcher.san_type
	sanMatcherMatcher        = 2  // SubjectAltNameMatcher.matcher
	stringMatcherExact       = 1  // StringMatcher.exact
	socketName               = 1  // core.TransportSocket.name
	socketTypedConfig        = 3  // core.TransportSocket.typed_config
	anyTypeURL               = 1  // Any.type_url
	anyValue                 = 2  // Any.value
)

const upstreamTLSType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

// upstreamMTLSShapes are the client side of Istio mTLS without SANs and
// SNI, without and with HTTP/2 in the ALPN, validated and marshalled once.
var upstreamMTLSShapes = sync.OnceValues(func() ([2]resource.Preencoded, error) {
	var out [2]resource.Preencoded
	for i, alpn := range [][]string{mtlsClientALPN, mtlsClientH2ALPN} {
		ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: mtlsCommon(nil, alpn, false)}
		if err := ctx.ValidateAll(); err != nil {
			return out, fmt.Errorf("upstream TLS shape: %w", err)
		}
		p, err := resource.Preencode(ctx)
		if err != nil {
			return out, err
		}
		out[i] = p
	}
	return out, nil
})

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

// mustAny packs a message built from constants, which cannot fail to
// marshal; every test that generates a sidecar's config runs it.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("pack %s: %v", m.ProtoReflect().Descriptor().FullName(), err))
	}
	return a
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
	var digits [20]byte // a concatenation allocates once
	return "outbound_." + string(strconv.AppendUint(digits[:0], uint64(port), 10)) + "_." + subset + "_." + host
}

var connectTimeout = durationpb.New(10 * time.Second)

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
