package interop

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1"
)

// The names pilot-agent gives what it serves over SDS.
const (
	sdsCluster     = "sds-grpc"
	sdsCertificate = "default"
	sdsRoot        = "ROOTCA"
)

const (
	upstreamTLSType   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	downstreamTLSType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)

// clusterTLS describes what a cluster does about upstream TLS, for
// comparing two generators: "plaintext", "TLS{…}" or, with auto-mTLS,
// "matches[…]" in order.
func clusterTLS(c *clusterv3.Cluster) string {
	var parts []string
	if ts := c.GetTransportSocket(); ts != nil {
		parts = append(parts, transportSocketTLS(ts))
	}
	if ms := c.GetTransportSocketMatches(); len(ms) > 0 {
		var each []string
		for _, m := range ms {
			each = append(each, structString(m.GetMatch())+"→"+transportSocketTLS(m.GetTransportSocket()))
		}
		parts = append(parts, "matches["+strings.Join(each, ", ")+"]")
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, " + ")
}

func structString(s *structpb.Struct) string {
	var kv []string
	for k, v := range s.GetFields() {
		kv = append(kv, k+"="+v.GetStringValue())
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ",") + "}"
}

// transportSocketTLS describes an upstream transport socket.
func transportSocketTLS(ts *corev3.TransportSocket) string {
	if ts == nil || ts.GetTypedConfig().GetTypeUrl() != upstreamTLSType {
		return "plaintext"
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return "TLS(undecodable: " + err.Error() + ")"
	}
	common := ctx.GetCommonTlsContext()
	var certs []string
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		certs = append(certs, sdsString(c))
	}
	sans, sanErr := upstreamSANs(ctx)
	sanText := fmt.Sprint(sans)
	if sanErr != nil {
		sanText = sanErr.Error()
	}
	return fmt.Sprintf("TLS{cert %v, ca %s, SAN %s, SNI %q, ALPN %q}", certs,
		sdsString(common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()),
		sanText, ctx.GetSni(), common.GetAlpnProtocols())
}

// sdsString is "<secret>@<cluster>" of an SDS secret config.
func sdsString(c *tlsv3.SdsSecretConfig) string {
	if c == nil {
		return "none"
	}
	cluster := "inline"
	for _, g := range c.GetSdsConfig().GetApiConfigSource().GetGrpcServices() {
		cluster = g.GetEnvoyGrpc().GetClusterName()
	}
	return c.GetName() + "@" + cluster
}

// checkSDS checks that c is the secret name served by pilot-agent's SDS
// over the sds-grpc cluster.
func checkSDS(c *tlsv3.SdsSecretConfig, name string) error {
	if c == nil {
		return fmt.Errorf("no SDS secret, want %s@%s", name, sdsCluster)
	}
	src := c.GetSdsConfig().GetApiConfigSource()
	clusters := []string{}
	for _, g := range src.GetGrpcServices() {
		clusters = append(clusters, g.GetEnvoyGrpc().GetClusterName())
	}
	if c.GetName() != name || len(clusters) != 1 || clusters[0] != sdsCluster ||
		(src.GetApiType() != corev3.ApiConfigSource_GRPC && src.GetApiType() != corev3.ApiConfigSource_DELTA_GRPC) {
		return fmt.Errorf("SDS secret %q from %s %v, want %s@%s over gRPC", c.GetName(), src.GetApiType(), clusters, name, sdsCluster)
	}
	return nil
}

// upstreamSANs returns the subject alternative names an upstream TLS
// context accepts, sorted; each must be an exact match of a URI SAN.
func upstreamSANs(ctx *tlsv3.UpstreamTlsContext) ([]string, error) {
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if vc == nil {
		vc = ctx.GetCommonTlsContext().GetValidationContext()
	}
	var out []string
	var errs []error
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		if m.GetSanType() != tlsv3.SubjectAltNameMatcher_URI || m.GetMatcher().GetExact() == "" {
			errs = append(errs, fmt.Errorf("SAN matcher %v is not an exact URI", m))
			continue
		}
		out = append(out, m.GetMatcher().GetExact())
	}
	for _, m := range vc.GetMatchSubjectAltNames() { //nolint:staticcheck // read what a generator may still set
		if m.GetExact() == "" {
			errs = append(errs, fmt.Errorf("SAN matcher %v is not exact", m))
			continue
		}
		out = append(out, m.GetExact())
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}

// checkIstioUpstreamTLS checks that ts originates Istio mTLS: the workload
// certificate and the root from pilot-agent's SDS, and exactly the SPIFFE
// IDs sans.
func checkIstioUpstreamTLS(ts *corev3.TransportSocket, sans []string) error {
	if ts == nil || ts.GetTypedConfig().GetTypeUrl() != upstreamTLSType {
		return fmt.Errorf("transport socket %q is not an UpstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return fmt.Errorf("decode UpstreamTlsContext: %w", err)
	}
	common := ctx.GetCommonTlsContext()
	var errs []error
	if certs := common.GetTlsCertificateSdsSecretConfigs(); len(certs) != 1 {
		errs = append(errs, fmt.Errorf("%d SDS certificates, want 1", len(certs)))
	} else if err := checkSDS(certs[0], sdsCertificate); err != nil {
		errs = append(errs, fmt.Errorf("certificate: %w", err))
	}
	if len(common.GetTlsCertificates()) > 0 {
		errs = append(errs, errors.New("inline certificates"))
	}
	if err := checkSDS(common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(), sdsRoot); err != nil {
		errs = append(errs, fmt.Errorf("validation context: %w", err))
	}
	got, err := upstreamSANs(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if !slices.Equal(got, sans) {
		errs = append(errs, fmt.Errorf("SANs %q, want exactly %q", got, sans))
	}
	return errors.Join(errs...)
}

// checkOriginationTLS checks that ts originates the TLS of a
// DestinationRule's SIMPLE or MUTUAL settings with files: the client
// certificate (MUTUAL) and the CA (the system's when none is named) from
// pilot-agent's SDS, never the workload's identity, and the rule's SNI and
// SANs exactly.
func checkOriginationTLS(ts *corev3.TransportSocket, s *networkingapi.ClientTLSSettings) error {
	if ts == nil || ts.GetTypedConfig().GetTypeUrl() != upstreamTLSType {
		return fmt.Errorf("transport socket %q is not an UpstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return fmt.Errorf("decode UpstreamTlsContext: %w", err)
	}
	common := ctx.GetCommonTlsContext()
	var errs []error
	if s.GetCredentialName() != "" {
		return errors.Join(append(errs, checkCredentialTLS(ctx, s))...)
	}
	certs := common.GetTlsCertificateSdsSecretConfigs()
	switch {
	case s.GetMode() == networkingapi.ClientTLSSettings_SIMPLE && len(certs) != 0:
		errs = append(errs, fmt.Errorf("SIMPLE presents certificates %v", certs))
	case s.GetMode() == networkingapi.ClientTLSSettings_MUTUAL && len(certs) != 1:
		errs = append(errs, fmt.Errorf("%d SDS certificates, want 1", len(certs)))
	case s.GetMode() == networkingapi.ClientTLSSettings_MUTUAL:
		if err := checkSDS(certs[0], "file-cert:"+s.GetClientCertificate()+"~"+s.GetPrivateKey()); err != nil {
			errs = append(errs, fmt.Errorf("certificate: %w", err))
		}
	}
	if len(common.GetTlsCertificates()) > 0 {
		errs = append(errs, errors.New("inline certificates"))
	}
	ca := s.GetCaCertificates()
	if ca == "" {
		ca = "system"
	}
	if s.GetInsecureSkipVerify().GetValue() {
		if v := common.GetValidationContextType(); v != nil && proto.Size(common.GetValidationContext()) != 0 {
			errs = append(errs, fmt.Errorf("insecureSkipVerify, but the server is validated: %v", v))
		}
	} else if err := checkSDS(common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(), "file-root:"+ca); err != nil {
		errs = append(errs, fmt.Errorf("validation context: %w", err))
	}
	got, err := upstreamSANs(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if want := slices.Sorted(slices.Values(s.GetSubjectAltNames())); !slices.Equal(got, want) {
		errs = append(errs, fmt.Errorf("SANs %q, want exactly %q", got, want))
	}
	if ctx.GetSni() != s.GetSni() {
		errs = append(errs, fmt.Errorf("SNI %q, want %q", ctx.GetSni(), s.GetSni()))
	}
	return errors.Join(errs...)
}

// checkCredentialTLS checks that ctx originates TLS with the Secret of
// credentialName (the client certificate for MUTUAL, the CA from
// "<name>-cacert"), both fetched over ADS from istiod.
func checkCredentialTLS(ctx *tlsv3.UpstreamTlsContext, s *networkingapi.ClientTLSSettings) error {
	common := ctx.GetCommonTlsContext()
	var errs []error
	var want []string
	if s.GetMode() == networkingapi.ClientTLSSettings_MUTUAL {
		want = append(want, "kubernetes://"+s.GetCredentialName())
	}
	configs := common.GetTlsCertificateSdsSecretConfigs()
	if !s.GetInsecureSkipVerify().GetValue() {
		want = append(want, "kubernetes://"+s.GetCredentialName()+"-cacert")
		configs = append(configs, common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig())
	} else if common.GetValidationContextType() != nil {
		errs = append(errs, fmt.Errorf("insecureSkipVerify, but the server is validated: %v", common.GetValidationContextType()))
	}
	var got []string
	for _, c := range configs {
		if c.GetSdsConfig().GetAds() == nil {
			errs = append(errs, fmt.Errorf("secret %s is not fetched over ADS", c.GetName()))
		}
		got = append(got, c.GetName())
	}
	if !slices.Equal(got, want) {
		errs = append(errs, fmt.Errorf("secrets %q, want %q", got, want))
	}
	sans, err := upstreamSANs(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if want := slices.Sorted(slices.Values(s.GetSubjectAltNames())); !slices.Equal(sans, want) {
		errs = append(errs, fmt.Errorf("SANs %q, want exactly %q", sans, want))
	}
	return errors.Join(errs...)
}

// checkInboundMTLS checks that a downstream TLS context requires a client
// certificate validated against ROOTCA, with the workload certificate,
// both from pilot-agent's SDS.
func checkInboundMTLS(ts *corev3.TransportSocket) error {
	if ts.GetTypedConfig().GetTypeUrl() != downstreamTLSType {
		return fmt.Errorf("transport socket %q is not a DownstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return fmt.Errorf("decode DownstreamTlsContext: %w", err)
	}
	var errs []error
	if !ctx.GetRequireClientCertificate().GetValue() {
		errs = append(errs, errors.New("client certificate not required"))
	}
	common := ctx.GetCommonTlsContext()
	if certs := common.GetTlsCertificateSdsSecretConfigs(); len(certs) != 1 {
		errs = append(errs, fmt.Errorf("%d SDS certificates, want 1", len(certs)))
	} else if err := checkSDS(certs[0], sdsCertificate); err != nil {
		errs = append(errs, fmt.Errorf("certificate: %w", err))
	}
	root := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
	if root == nil {
		root = common.GetValidationContextSdsSecretConfig()
	}
	if err := checkSDS(root, sdsRoot); err != nil {
		errs = append(errs, fmt.Errorf("validation context: %w", err))
	}
	if common.GetValidationContext() != nil && common.GetValidationContext().GetTrustedCa() != nil {
		errs = append(errs, errors.New("inline trusted CA"))
	}
	return errors.Join(errs...)
}

// originationContext is c's UpstreamTlsContext when it originates a
// DestinationRule's SIMPLE or MUTUAL TLS (it validates with something
// other than ROOTCA, or not at all), else nil.
func originationContext(c *clusterv3.Cluster) *tlsv3.UpstreamTlsContext {
	ts := c.GetTransportSocket()
	if ts.GetTypedConfig().GetTypeUrl() != upstreamTLSType {
		return nil
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return nil
	}
	if ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() == sdsRoot {
		return nil
	}
	return ctx
}

// autoSNI describes the upstream HTTP options that take the SNI from the
// request and validate the server's certificate against it; "none" when
// neither is set.
func autoSNI(c *clusterv3.Cluster) string {
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil {
		return "none"
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		return "undecodable: " + err.Error()
	}
	up := opts.GetUpstreamHttpProtocolOptions()
	if !up.GetAutoSni() && !up.GetAutoSanValidation() {
		return "none"
	}
	return fmt.Sprintf("auto_sni %v, auto_san_validation %v", up.GetAutoSni(), up.GetAutoSanValidation())
}
