package envoygen

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	udpa "github.com/cncf/xds/go/udpa/type/v1"
	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	fileaccesslog "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	reqwithoutquery "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetryv1 "istio.io/api/telemetry/v1"
)

// Istio's standard telemetry, as istio-proxy implements it: the metadata
// exchange filters tell each side of a connection who the other is (its
// workload, namespace, canonical service; its principal comes from the
// peer certificate), and istio.stats counts requests and connections
// with those labels (istio_requests_total,
// istio_request_duration_milliseconds, istio_tcp_*).
const (
	mxFilterName      = "istio.metadata_exchange"
	statsFilterName   = "istio.stats"
	fileAccessLogName = "envoy.access_loggers.file"

	peerMetadataType     = "type.googleapis.com/io.istio.http.peer_metadata.Config"
	metadataExchangeType = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange"
	// mxProtocol is the ALPN the TCP metadata exchange speaks, which
	// outbound mTLS offers first.
	mxProtocol = "istio-peer-exchange"
)

// TelemetryConfig is what mesh config says of the standard telemetry.
type TelemetryConfig struct {
	// Metrics puts istio.stats on every filter chain: mesh config
	// defaultProviders.metrics names a Prometheus provider, as Istio's
	// default ("prometheus") does. It stands for DefaultMetrics
	// ["prometheus"] when DefaultMetrics is nil.
	Metrics bool
	// AccessLogFile is mesh config accessLogFile: the path Envoy writes
	// an access log line to for every request and connection; "" for
	// none.
	AccessLogFile string
	// AccessLogJSON is mesh config accessLogEncoding JSON (else TEXT).
	AccessLogJSON bool
	// AccessLogFormat is mesh config accessLogFormat: with TEXT, Envoy's
	// format string (a newline added when missing); with JSON, a JSON
	// object of field name to format string. "" is Istio's default
	// format; a JSON format that does not parse also gives the default,
	// as in Istio.
	AccessLogFormat string
	// Providers are mesh config extensionProviders, which Telemetries
	// and DefaultMetrics and DefaultAccessLogging name; Istio's built-in
	// "prometheus", "stackdriver" and "envoy" (a file access log to
	// /dev/stdout) are added where none takes their name.
	Providers []*meshv1alpha1.MeshConfig_ExtensionProvider
	// DefaultMetrics and DefaultAccessLogging are mesh config
	// defaultProviders: the providers of proxies no Telemetry gives
	// others.
	DefaultMetrics, DefaultAccessLogging []string
}

// MaxAccessLogFormat bounds mesh config accessLogFormat.
const MaxAccessLogFormat = 16 << 10

// Telemetry is the telemetry configuration of the proxies of one scope
// (the mesh config, and the Telemetries selecting them), its filters
// built once (NewTelemetry, ForScope) and shared by every chain and
// listener that carries them. A nil *Telemetry adds nothing.
type Telemetry struct {
	cfg TelemetryConfig
	// key tells, within one model snapshot, this Telemetry's filters from
	// those of other scopes: "" for the mesh config's alone. Resource
	// keys carry it.
	key string

	tcpMX  *listener.Filter
	httpMX [telemetryClasses]*hcm.HttpFilter
	class  [telemetryClasses]classTelemetry

	// Wire forms, for the listeners encoded directly (wire.go): the
	// outbound istio.stats Filters and AccessLogs, each a message's
	// content.
	outboundStatsWire [][]byte
	accessLogWire     [][]byte

	// scopes memoizes ForScope (telemetryapi.go); only on the mesh
	// config's Telemetry.
	scopes *telemetryMemo
	// notes say what of the mesh config's providers or the scope's
	// Telemetries is not generated.
	notes []string
}

// classTelemetry is what a Telemetry puts on the chains of one class.
type classTelemetry struct {
	httpStats         []*hcm.HttpFilter
	tcpStats          []*listener.Filter
	accessLog         []*accesslog.AccessLog // on connection managers and tcp_proxy
	listenerAccessLog []*accesslog.AccessLog // on listeners: connections no chain took (NR)
}

// telemetryClass is Istio's listener class, which decides the direction
// of the metadata exchange and what istio.stats reports.
type telemetryClass uint8

const (
	sidecarOutbound telemetryClass = iota
	sidecarInbound
	gatewayClass
	telemetryClasses
)

// NewTelemetry builds the filters c asks for.
func NewTelemetry(c TelemetryConfig) (*Telemetry, error) {
	if len(c.AccessLogFormat) > MaxAccessLogFormat {
		return nil, fmt.Errorf("accessLogFormat is %d bytes, more than the limit of %d", len(c.AccessLogFormat), MaxAccessLogFormat)
	}
	c.Providers = withBuiltinProviders(c.Providers)
	if c.DefaultMetrics == nil && c.Metrics {
		c.DefaultMetrics = []string{defaultMetricsProvider}
	}
	t := &Telemetry{cfg: c, scopes: &telemetryMemo{}}
	var err error
	if t.tcpMX, err = tcpMetadataExchange(); err != nil {
		return nil, err
	}
	for class := range telemetryClasses {
		if t.httpMX[class], err = httpMetadataExchange(class == sidecarInbound); err != nil {
			return nil, err
		}
	}
	if err := t.build(nil); err != nil {
		return nil, err
	}
	return t, nil
}

// build makes the istio.stats filters and access logs of each class from
// the mesh config and specs, the Telemetries of t's scope in Istio's
// order of merging.
func (t *Telemetry) build(specs []*telemetryv1.Telemetry) error {
	for class := range telemetryClasses {
		stats, err := t.statsConfigs(specs, class)
		if err != nil {
			return err
		}
		ct := &t.class[class]
		for _, a := range stats {
			ct.httpStats = append(ct.httpStats, &hcm.HttpFilter{Name: statsFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}})
			ct.tcpStats = append(ct.tcpStats, &listener.Filter{Name: statsFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}})
		}
		if ct.accessLog, ct.listenerAccessLog, err = t.accessLogs(specs, class); err != nil {
			return err
		}
	}
	for _, f := range t.class[sidecarOutbound].tcpStats {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(f)
		if err != nil {
			return fmt.Errorf("stats filter: %w", err)
		}
		t.outboundStatsWire = append(t.outboundStatsWire, raw)
	}
	for _, al := range t.class[sidecarOutbound].accessLog {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(al)
		if err != nil {
			return fmt.Errorf("access log: %w", err)
		}
		t.accessLogWire = append(t.accessLogWire, raw)
	}
	return nil
}

// meshAccessLogs are the access logs of mesh config accessLogFile, on
// chains and on listeners, as Istio applies them when no Telemetry (nor
// defaultProviders.accessLogging) configures logging.
func (t *Telemetry) meshAccessLogs() (logs, listenerLogs []*accesslog.AccessLog, err error) {
	if t.cfg.AccessLogFile == "" {
		return nil, nil, nil
	}
	al, err := fileAccessLog(t.cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := al.ValidateAll(); err != nil {
		return nil, nil, fmt.Errorf("access log: %w", err)
	}
	return []*accesslog.AccessLog{al}, []*accesslog.AccessLog{{
		Name: al.Name, ConfigType: al.ConfigType, Filter: noRouteFilter(),
	}}, nil
}

// noRouteFilter keeps what a listener logs to NR: no filter chain took
// the connection, which no chain's own log would record.
func noRouteFilter() *accesslog.AccessLogFilter {
	return &accesslog.AccessLogFilter{FilterSpecifier: &accesslog.AccessLogFilter_ResponseFlagFilter{
		ResponseFlagFilter: &accesslog.ResponseFlagFilter{Flags: []string{"NR"}},
	}}
}

// typedStruct is Istio's way of configuring istio-proxy's own filters: a
// udpa TypedStruct naming the filter's config type, its fields a Struct.
func typedStruct(typeURL string, fields map[string]any) (*anypb.Any, error) {
	v, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeURL, err)
	}
	a, err := deterministicAny(&udpa.TypedStruct{TypeUrl: typeURL, Value: v})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeURL, err)
	}
	return a, nil
}

// deterministicAny packs m with its map entries in a fixed order, so
// that equal configurations have equal bytes, whenever built: a
// resource's version is the hash of its bytes, and one that changes
// without cause is pushed again to every proxy.
func deterministicAny(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// tcpMetadataExchange is the TCP metadata exchange of the server's
// chains, spoken over the "istio-peer-exchange" ALPN; without it, the peer
// is looked up by its address.
func tcpMetadataExchange() (*listener.Filter, error) {
	a, err := mxConfig()
	if err != nil {
		return nil, err
	}
	return &listener.Filter{Name: mxFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}, nil
}

func mxConfig() (*anypb.Any, error) {
	return typedStruct(metadataExchangeType, map[string]any{"protocol": mxProtocol, "enable_discovery": true})
}

// clusterFilters are the filters of every outbound cluster, as Istio
// always sets them: the client's side of the TCP metadata exchange, which
// begins when the server's sidecar accepts the "istio-peer-exchange" ALPN
// that outbound mTLS offers first.
var clusterFilters = sync.OnceValues(func() ([]*cluster.Filter, error) {
	a, err := mxConfig()
	if err != nil {
		return nil, err
	}
	return []*cluster.Filter{{Name: mxFilterName, TypedConfig: a}}, nil
})

// httpMetadataExchange is the HTTP peer metadata filter: the client sends
// its own metadata in headers and learns the server's from the response
// headers or by its address; the server the other way round.
func httpMetadataExchange(inbound bool) (*hcm.HttpFilter, error) {
	dir := "upstream"
	if inbound {
		dir = "downstream"
	}
	a, err := typedStruct(peerMetadataType, map[string]any{
		dir + "_discovery":   []any{map[string]any{"istio_headers": map[string]any{}}, map[string]any{"workload_discovery": map[string]any{}}},
		dir + "_propagation": []any{map[string]any{"istio_headers": map[string]any{}}},
	})
	if err != nil {
		return nil, err
	}
	return &hcm.HttpFilter{Name: mxFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}

// defaultTextFormat is Istio's default access log line.
const defaultTextFormat = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" " +
	"%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% " +
	"\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% " +
	"%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" " +
	"\"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% " +
	"%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% " +
	"%REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"

// defaultJSONFormat is Istio's default access log object: the fields of
// the default line, by name.
var defaultJSONFormat = map[string]string{
	"start_time":                        "%START_TIME%",
	"route_name":                        "%ROUTE_NAME%",
	"method":                            "%REQ(:METHOD)%",
	"path":                              "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
	"protocol":                          "%PROTOCOL%",
	"response_code":                     "%RESPONSE_CODE%",
	"response_flags":                    "%RESPONSE_FLAGS%",
	"response_code_details":             "%RESPONSE_CODE_DETAILS%",
	"connection_termination_details":    "%CONNECTION_TERMINATION_DETAILS%",
	"bytes_received":                    "%BYTES_RECEIVED%",
	"bytes_sent":                        "%BYTES_SENT%",
	"duration":                          "%DURATION%",
	"upstream_service_time":             "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
	"x_forwarded_for":                   "%REQ(X-FORWARDED-FOR)%",
	"user_agent":                        "%REQ(USER-AGENT)%",
	"request_id":                        "%REQ(X-REQUEST-ID)%",
	"authority":                         "%REQ(:AUTHORITY)%",
	"upstream_host":                     "%UPSTREAM_HOST%",
	"upstream_cluster":                  "%UPSTREAM_CLUSTER_RAW%",
	"upstream_local_address":            "%UPSTREAM_LOCAL_ADDRESS%",
	"downstream_local_address":          "%DOWNSTREAM_LOCAL_ADDRESS%",
	"downstream_remote_address":         "%DOWNSTREAM_REMOTE_ADDRESS%",
	"requested_server_name":             "%REQUESTED_SERVER_NAME%",
	"upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
}

// reqWithoutQuery is the formatter extension a format using
// %REQ_WITHOUT_QUERY(...)% needs.
const reqWithoutQuery = "%REQ_WITHOUT_QUERY"

// fileAccessLog is Envoy's file access log as mesh config's
// accessLogFile, accessLogEncoding and accessLogFormat ask for it.
func fileAccessLog(c TelemetryConfig) (*accesslog.AccessLog, error) {
	format := &core.SubstitutionFormatString{}
	needsReqWithoutQuery := false
	if c.AccessLogJSON {
		fields := map[string]any{}
		for k, v := range defaultJSONFormat {
			fields[k] = v
		}
		if c.AccessLogFormat != "" {
			var own map[string]any
			if err := json.Unmarshal([]byte(c.AccessLogFormat), &own); err == nil && own != nil {
				fields = own
			}
		}
		s, err := structpb.NewStruct(fields)
		if err != nil {
			return nil, fmt.Errorf("accessLogFormat: %w", err)
		}
		for _, v := range s.GetFields() {
			needsReqWithoutQuery = needsReqWithoutQuery || strings.Contains(v.GetStringValue(), reqWithoutQuery)
		}
		format.Format = &core.SubstitutionFormatString_JsonFormat{JsonFormat: s}
		format.JsonFormatOptions = &core.JsonFormatOptions{}
	} else {
		text := defaultTextFormat
		if c.AccessLogFormat != "" {
			text = c.AccessLogFormat
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
		}
		needsReqWithoutQuery = setTextFormat(format, text)
	}
	return fileAccessLogTo(c.AccessLogFile, format, needsReqWithoutQuery)
}

// setTextFormat makes text format's, and reports whether it uses
// %REQ_WITHOUT_QUERY(...)%.
func setTextFormat(format *core.SubstitutionFormatString, text string) bool {
	format.Format = &core.SubstitutionFormatString_TextFormatSource{TextFormatSource: &core.DataSource{
		Specifier: &core.DataSource_InlineString{InlineString: text},
	}}
	return strings.Contains(text, reqWithoutQuery)
}

// fileAccessLogTo is Envoy's file access log writing to path in format,
// with the formatter %REQ_WITHOUT_QUERY(...)% needs when it is used.
func fileAccessLogTo(path string, format *core.SubstitutionFormatString, needsReqWithoutQuery bool) (*accesslog.AccessLog, error) {
	if needsReqWithoutQuery {
		f, err := reqWithoutQueryFormatter()
		if err != nil {
			return nil, err
		}
		format.Formatters = []*core.TypedExtensionConfig{f}
	}
	a, err := deterministicAny(&fileaccesslog.FileAccessLog{
		Path:            path,
		AccessLogFormat: &fileaccesslog.FileAccessLog_LogFormat{LogFormat: format},
	})
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return &accesslog.AccessLog{Name: fileAccessLogName, ConfigType: &accesslog.AccessLog_TypedConfig{TypedConfig: a}}, nil
}

// providerFileAccessLog is the file access log of an
// envoyFileAccessLog extension provider, as Istio builds it: to
// /dev/stdout unless it says where; its text format (Istio's default when
// empty, a newline added) or its JSON labels (Istio's default object when
// it has none).
func providerFileAccessLog(fp *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider) (*accesslog.AccessLog, error) {
	format := &core.SubstitutionFormatString{OmitEmptyValues: fp.GetOmitEmptyValues()}
	needsReqWithoutQuery := false
	if labels := fp.GetLogFormat().GetLabels(); labels != nil {
		if len(labels.GetFields()) == 0 {
			fields := map[string]any{}
			for k, v := range defaultJSONFormat {
				fields[k] = v
			}
			var err error
			if labels, err = structpb.NewStruct(fields); err != nil {
				return nil, fmt.Errorf("access log: %w", err)
			}
		}
		for _, v := range labels.GetFields() {
			needsReqWithoutQuery = needsReqWithoutQuery || strings.Contains(v.GetStringValue(), reqWithoutQuery)
		}
		format.Format = &core.SubstitutionFormatString_JsonFormat{JsonFormat: labels}
		format.JsonFormatOptions = &core.JsonFormatOptions{}
	} else {
		text := fp.GetLogFormat().GetText()
		switch {
		case text == "":
			text = defaultTextFormat
		case !strings.HasSuffix(text, "\n"):
			text += "\n"
		}
		needsReqWithoutQuery = setTextFormat(format, text)
	}
	return fileAccessLogTo(cmp.Or(fp.GetPath(), "/dev/stdout"), format, needsReqWithoutQuery)
}

// Metrics reports whether istio.stats is on the outbound side.
func (t *Telemetry) Metrics() bool { return t != nil && len(t.class[sidecarOutbound].httpStats) > 0 }

// Key tells t's filters from those of other scopes within one snapshot:
// "" for the mesh config's alone.
func (t *Telemetry) Key() string {
	if t == nil {
		return ""
	}
	return t.key
}

// hcm adds to m, a connection manager of class c whose last filter is the
// router, what Istio's telemetry puts there: the metadata exchange
// first (before authorization, which may read the peer), istio.stats just
// before the router, and the access logs.
func (t *Telemetry) hcm(m *hcm.HttpConnectionManager, c telemetryClass) {
	if t == nil || len(m.HttpFilters) == 0 {
		return // no router: not a connection manager generation makes
	}
	ct := &t.class[c]
	filters := make([]*hcm.HttpFilter, 0, len(m.HttpFilters)+1+len(ct.httpStats))
	filters = append(filters, t.httpMX[c])
	filters = append(filters, m.HttpFilters[:len(m.HttpFilters)-1]...)
	filters = append(filters, ct.httpStats...)
	m.HttpFilters = append(filters, m.HttpFilters[len(m.HttpFilters)-1])
	m.AccessLog = append(m.AccessLog, ct.accessLog...)
}

// inboundNetwork are the filters that come first on every chain of
// virtualInbound: the TCP metadata exchange. (A client's side exchanges
// through its clusters' filter instead.)
func (t *Telemetry) inboundNetwork() []*listener.Filter {
	if t == nil {
		return nil
	}
	return []*listener.Filter{t.tcpMX}
}

// tcpChain is the filters of a chain of class c that proxies to cluster:
// on the inbound side the metadata exchange first, then authz (the
// chain's RBAC filters), istio.stats, and tcp_proxy, which logs each
// connection when logged.
func (t *Telemetry) tcpChain(c telemetryClass, authz []*listener.Filter, statPrefix, cluster string, logged bool) ([]*listener.Filter, error) {
	return t.tcpFilters(c, authz, &tcpproxy.TcpProxy{StatPrefix: statPrefix, ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: cluster}}, logged)
}

// tcpFilters is tcpChain for the tcp_proxy tp, which it completes.
func (t *Telemetry) tcpFilters(c telemetryClass, authz []*listener.Filter, tp *tcpproxy.TcpProxy, logged bool) ([]*listener.Filter, error) {
	out := make([]*listener.Filter, 0, len(authz)+3)
	if t != nil {
		if c == sidecarInbound {
			out = append(out, t.tcpMX)
		}
		if logged {
			tp.AccessLog = t.class[c].accessLog
		}
	}
	out = append(out, authz...)
	if t != nil {
		out = append(out, t.class[c].tcpStats...)
	}
	a, err := anypb.New(tp)
	if err != nil {
		return nil, fmt.Errorf("tcp_proxy %s: %w", tp.GetStatPrefix(), err)
	}
	return append(out, &listener.Filter{Name: tcpProxyFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}), nil
}

// listenerLogs are the access logs of a listener of class c, for
// connections no filter chain takes.
func (t *Telemetry) listenerLogs(c telemetryClass) []*accesslog.AccessLog {
	if t == nil {
		return nil
	}
	return slices.Clone(t.class[c].listenerAccessLog)
}

func reqWithoutQueryFormatter() (*core.TypedExtensionConfig, error) {
	a, err := anypb.New(&reqwithoutquery.ReqWithoutQuery{})
	if err != nil {
		return nil, fmt.Errorf("access log formatter: %w", err)
	}
	return &core.TypedExtensionConfig{Name: "envoy.formatter.req_without_query", TypedConfig: a}, nil
}

// defaultMetricsProvider is the Prometheus provider Istio defines
// whatever the mesh config says, and names in defaultProviders.metrics
// as installed.
const defaultMetricsProvider = "prometheus"

// TelemetryFromMesh is what Envoy proxies' standard telemetry reads of mc:
//   - metrics (istio.stats) when defaultProviders.metrics names a
//     Prometheus provider: one of extensionProviders, or Istio's built-in
//     "prometheus" when none of them takes that name. A mesh config
//     without defaultProviders gets metrics, as Istio's installation
//     writes defaultProviders.metrics [prometheus] into it.
//   - accessLogFile, accessLogEncoding and accessLogFormat as Istio
//     applies them when no Telemetry resource configures logging.
//   - extensionProviders and defaultProviders, which Telemetries name.
func TelemetryFromMesh(mc *meshv1alpha1.MeshConfig) TelemetryConfig {
	c := TelemetryConfig{
		AccessLogFile:        mc.GetAccessLogFile(),
		AccessLogJSON:        mc.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON,
		AccessLogFormat:      mc.GetAccessLogFormat(),
		Providers:            withBuiltinProviders(mc.GetExtensionProviders()),
		DefaultMetrics:       slices.Clone(mc.GetDefaultProviders().GetMetrics()),
		DefaultAccessLogging: slices.Clone(mc.GetDefaultProviders().GetAccessLogging()),
	}
	if mc.GetDefaultProviders() == nil {
		c.DefaultMetrics = []string{defaultMetricsProvider}
	}
	for _, name := range c.DefaultMetrics {
		if p := findProvider(c.Providers, name); p != nil && p.GetPrometheus() != nil {
			c.Metrics = true
		}
	}
	if c.DefaultMetrics == nil {
		c.DefaultMetrics = []string{} // named none: not Metrics' shorthand
	}
	return c
}
