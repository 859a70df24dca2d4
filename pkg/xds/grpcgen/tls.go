package grpcgen

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// commonTLS refers to the "default" provider for the identity and roots,
// the only form gRPC accepts. SAN matchers are exact and client side only.
func commonTLS(sans []string) *tlsv3.CommonTlsContext {
	vc := &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
			InstanceName: ProviderInstance, CertificateName: RootCertName,
		},
	}
	for _, s := range sans {
		vc.MatchSubjectAltNames = append(vc.MatchSubjectAltNames, &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Exact{Exact: s},
		})
	}
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
			InstanceName: ProviderInstance, CertificateName: IdentityCertName,
		},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
	}
}

func upstreamTLS(sans []string) (*core.TransportSocket, error) {
	return transportSocket(&tlsv3.UpstreamTlsContext{CommonTlsContext: commonTLS(sans)})
}

func downstreamTLS() (*core.TransportSocket, error) {
	return transportSocket(&tlsv3.DownstreamTlsContext{
		CommonTlsContext:         commonTLS(nil),
		RequireClientCertificate: wrapperspb.Bool(true),
	})
}

func transportSocket(m proto.Message) (*core.TransportSocket, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("tls context: %w", err)
	}
	return &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}
