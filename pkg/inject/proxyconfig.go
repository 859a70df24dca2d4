package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

const maxProxyConfigLen = 64 << 10

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// proxySettings is the effective ProxyConfig and what is derived from it.
type proxySettings struct {
	config   *meshv1alpha1.ProxyConfig
	json     string
	mode     meshv1alpha1.ProxyConfig_InboundInterceptionMode
	hold     bool
	metadata []envPair
}

type envPair struct{ name, value string }

// EnvProxyConfigXDSAgent is pilot-agent's switch for PCDS, the trust
// bundle over xDS. The injector sets it to "true" in proxyMetadata unless
// meshConfig.defaultConfig.proxyMetadata or the pod's proxy.istio.io/config
// sets it.
const EnvProxyConfigXDSAgent = "PROXY_CONFIG_XDS_AGENT"

// resolveProxyConfig merges the mesh default ProxyConfig, this istiod's
// discovery address and the pod's proxy.istio.io/config annotation.
func resolveProxyConfig(annos map[string]string, v *Values) (proxySettings, error) {
	pc := &meshv1alpha1.ProxyConfig{}
	if def := v.Mesh().GetDefaultConfig(); def != nil {
		pc = proto.Clone(def).(*meshv1alpha1.ProxyConfig)
	}
	if pc.GetDiscoveryAddress() == "" {
		pc.DiscoveryAddress = v.DiscoveryAddress()
	}
	if raw, ok := annos[AnnotationProxyConfig]; ok {
		over, err := parseProxyConfig(raw)
		if err != nil {
			return proxySettings{}, annotationErr(AnnotationProxyConfig, err)
		}
		if err := checkProxyConfig(over); err != nil {
			return proxySettings{}, annotationErr(AnnotationProxyConfig, err)
		}
		proto.Merge(pc, over)
	}
	// The agent asks istiod for the trust bundle (PCDS) unless the mesh
	// or the pod says otherwise: a root rotation reaches it that way.
	if _, set := pc.GetProxyMetadata()[EnvProxyConfigXDSAgent]; !set {
		if pc.ProxyMetadata == nil {
			pc.ProxyMetadata = map[string]string{}
		}
		pc.ProxyMetadata[EnvProxyConfigXDSAgent] = "true"
	}
	b, err := protojson.MarshalOptions{}.Marshal(pc)
	if err != nil {
		return proxySettings{}, fmt.Errorf("encode proxy config: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return proxySettings{}, fmt.Errorf("compact proxy config: %w", err)
	}
	out := proxySettings{
		config: pc,
		json:   compact.String(),
		mode:   pc.GetInterceptionMode(),
		hold:   pc.GetHoldApplicationUntilProxyStarts().GetValue() || v.Global.Proxy.HoldApplicationUntilProxyStarts,
	}
	keys := make([]string, 0, len(pc.GetProxyMetadata()))
	for k := range pc.GetProxyMetadata() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out.metadata = append(out.metadata, envPair{k, pc.GetProxyMetadata()[k]})
	}
	return out, nil
}

// parseProxyConfig decodes YAML or JSON into a ProxyConfig, refusing
// unknown fields.
func parseProxyConfig(raw string) (*meshv1alpha1.ProxyConfig, error) {
	if len(raw) > maxProxyConfigLen {
		return nil, errors.New("too long")
	}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	trimmed := bytes.TrimSpace(js)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("must be a ProxyConfig object")
	}
	pc := &meshv1alpha1.ProxyConfig{}
	if err := protojson.Unmarshal(js, pc); err != nil {
		return nil, fmt.Errorf("not a ProxyConfig: %w", meshconfig.ProtoError{Err: err})
	}
	return pc, nil
}

// reservedEnv are the variables the injector sets itself; proxyMetadata may
// not replace them.
var reservedEnv = map[string]bool{
	"PILOT_CERT_PROVIDER": true, "CA_ADDR": true, "POD_NAME": true, "POD_NAMESPACE": true,
	"INSTANCE_IP": true, "SERVICE_ACCOUNT": true, "HOST_IP": true, "ISTIO_CPU_LIMIT": true,
	"PROXY_CONFIG": true, "ISTIO_META_POD_PORTS": true, "ISTIO_META_APP_CONTAINERS": true,
	"GOMEMLIMIT": true, "GOMAXPROCS": true, "ISTIO_META_CLUSTER_ID": true,
	"ISTIO_META_NODE_NAME": true, "ISTIO_META_INTERCEPTION_MODE": true, "ISTIO_META_NETWORK": true,
	"ISTIO_META_WORKLOAD_NAME": true, "ISTIO_META_OWNER": true, "ISTIO_META_MESH_ID": true,
	"TRUST_DOMAIN": true, "ISTIO_KUBE_APP_PROBERS": true, "ISTIO_PROMETHEUS_ANNOTATIONS": true,
	"ISTIO_META_GENERATOR": true, "OUTPUT_CERTS": true,
	"DISABLE_ENVOY": true, "GRPC_XDS_BOOTSTRAP": true, "GRPC_XDS_EXPERIMENTAL_SECURITY_SUPPORT": true,
}

// checkProxyConfig refuses settings that would change the sidecar's
// privileges or the variables the injector owns.
func checkProxyConfig(pc *meshv1alpha1.ProxyConfig) error {
	switch pc.GetInterceptionMode() {
	case meshv1alpha1.ProxyConfig_REDIRECT, meshv1alpha1.ProxyConfig_NONE:
	default:
		return fmt.Errorf("interceptionMode %s needs a privileged proxy and is not supported", pc.GetInterceptionMode())
	}
	for k, val := range pc.GetProxyMetadata() {
		if !envNameRE.MatchString(k) || len(k) > 256 {
			return fmt.Errorf("proxyMetadata key %.60q is not an environment variable name", k)
		}
		if reservedEnv[k] {
			return fmt.Errorf("proxyMetadata key %s is set by the injector", k)
		}
		if len(val) > maxProxyConfigLen {
			return fmt.Errorf("proxyMetadata %s: value too long", k)
		}
	}
	return nil
}
