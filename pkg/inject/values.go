package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

// Values is the "values" key of the istio-sidecar-injector ConfigMap: the
// Helm values that shape the injected sidecar. Field names and JSON keys are
// Istio's. Unknown keys are rejected when parsing.
type Values struct {
	Revision               string                 `json:"revision"`
	Global                 GlobalValues           `json:"global"`
	MeshConfig             json.RawMessage        `json:"meshConfig,omitempty"`
	SidecarInjectorWebhook SidecarInjectorWebhook `json:"sidecarInjectorWebhook"`

	// mesh is MeshConfig parsed; set by ParseConfig.
	mesh *meshv1alpha1.MeshConfig
}

// GlobalValues is values.global.
type GlobalValues struct {
	Hub               string       `json:"hub"`
	Tag               Tag          `json:"tag"`
	ImagePullPolicy   string       `json:"imagePullPolicy"`
	ImagePullSecrets  []string     `json:"imagePullSecrets"`
	IstioNamespace    string       `json:"istioNamespace"`
	MeshID            string       `json:"meshID"`
	Network           string       `json:"network"`
	TrustDomain       string       `json:"trustDomain"`
	CAAddress         string       `json:"caAddress"`
	PilotCertProvider string       `json:"pilotCertProvider"`
	NativeSidecar     bool         `json:"nativeSidecar"`
	LogAsJSON         bool         `json:"logAsJson"`
	Logging           Logging      `json:"logging"`
	MultiCluster      MultiCluster `json:"multiCluster"`
	SDS               SDS          `json:"sds"`
	Proxy             ProxyValues  `json:"proxy"`
	ProxyInit         ProxyInit    `json:"proxy_init"`
}

// Logging is values.global.logging.
type Logging struct {
	Level string `json:"level"`
}

// MultiCluster is values.global.multiCluster.
type MultiCluster struct {
	ClusterName string `json:"clusterName"`
}

// SDS is values.global.sds.
type SDS struct {
	Token struct {
		Aud string `json:"aud"`
	} `json:"token"`
}

// ProxyInit is values.global.proxy_init.
type ProxyInit struct {
	Image string `json:"image"`
}

// ProxyValues is values.global.proxy.
type ProxyValues struct {
	Image                           string                      `json:"image"`
	ClusterDomain                   string                      `json:"clusterDomain"`
	LogLevel                        string                      `json:"logLevel"`
	ComponentLogLevel               string                      `json:"componentLogLevel"`
	StatusPort                      int32                       `json:"statusPort"`
	Privileged                      bool                        `json:"privileged"`
	HoldApplicationUntilProxyStarts bool                        `json:"holdApplicationUntilProxyStarts"`
	IncludeIPRanges                 string                      `json:"includeIPRanges"`
	ExcludeIPRanges                 string                      `json:"excludeIPRanges"`
	IncludeInboundPorts             string                      `json:"includeInboundPorts"`
	ExcludeInboundPorts             string                      `json:"excludeInboundPorts"`
	ExcludeOutboundPorts            string                      `json:"excludeOutboundPorts"`
	ReadinessInitialDelaySeconds    int32                       `json:"readinessInitialDelaySeconds"`
	ReadinessPeriodSeconds          int32                       `json:"readinessPeriodSeconds"`
	ReadinessFailureThreshold       int32                       `json:"readinessFailureThreshold"`
	StartupProbe                    StartupProbe                `json:"startupProbe"`
	Resources                       corev1.ResourceRequirements `json:"resources"`
}

// StartupProbe is values.global.proxy.startupProbe.
type StartupProbe struct {
	Enabled          bool  `json:"enabled"`
	FailureThreshold int32 `json:"failureThreshold"`
}

// SidecarInjectorWebhook is values.sidecarInjectorWebhook.
type SidecarInjectorWebhook struct {
	RewriteAppHTTPProbe bool `json:"rewriteAppHTTPProbe"`
	// EnableNamespacesByDefault is Istio's: inject namespaces that carry
	// no injection label. Which namespaces are injected is the webhook's
	// selectors' choice, so only false is accepted; istioctl analyze reads
	// the key and requires it.
	EnableNamespacesByDefault bool `json:"enableNamespacesByDefault"`
}

// Tag is an image tag; Helm values may carry it as a number (1.28 vs "1.28").
type Tag string

// UnmarshalJSON accepts a JSON string or number.
func (t *Tag) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("tag: %w", err)
		}
		*t = Tag(s)
		return nil
	}
	if _, err := strconv.ParseFloat(string(b), 64); err != nil {
		return fmt.Errorf("tag must be a string or a number, got %.40q", b)
	}
	*t = Tag(b)
	return nil
}

// Mesh returns the parsed meshConfig (never nil once parsed).
func (v *Values) Mesh() *meshv1alpha1.MeshConfig {
	if v.mesh == nil {
		return &meshv1alpha1.MeshConfig{}
	}
	return v.mesh
}

// ProxyImage is the image of istio-proxy (and istio-init) from the values alone.
func (v *Values) ProxyImage() string {
	return imageFor(v.Global.Hub, v.Global.Proxy.Image, string(v.Global.Tag))
}

// InitImage is the image of istio-init from the values alone.
func (v *Values) InitImage() string {
	img := v.Global.ProxyInit.Image
	if img == "" {
		img = v.Global.Proxy.Image
	}
	return imageFor(v.Global.Hub, img, string(v.Global.Tag))
}

// imageFor follows Istio: a name with a "/" is a full reference, anything
// else is hub/name:tag.
func imageFor(hub, name, tag string) string {
	if strings.Contains(name, "/") {
		return name
	}
	if tag == "" {
		return hub + "/" + name
	}
	return hub + "/" + name + ":" + tag
}

// TrustDomain is meshConfig.trustDomain, else global.trustDomain.
func (v *Values) TrustDomain() string {
	if td := v.Mesh().GetTrustDomain(); td != "" {
		return td
	}
	return v.Global.TrustDomain
}

// DiscoveryAddress is the address of this istiod for xDS and certificates.
func (v *Values) DiscoveryAddress() string {
	name := "istiod"
	if v.Revision != "" {
		name += "-" + v.Revision
	}
	return name + "." + v.Global.IstioNamespace + ".svc:15012"
}

// CAAddress is global.caAddress when set, else the discovery address.
func (v *Values) CAAddress() string {
	if v.Global.CAAddress != "" {
		return v.Global.CAAddress
	}
	return v.DiscoveryAddress()
}

// PrometheusMerge reports meshConfig.enablePrometheusMerge (default true).
func (v *Values) PrometheusMerge() bool {
	if b := v.Mesh().GetEnablePrometheusMerge(); b != nil {
		return b.GetValue()
	}
	return true
}

// parseMeshConfig decodes the values' meshConfig strictly, like every
// other key of the injector's values.
func parseMeshConfig(raw json.RawMessage) (*meshv1alpha1.MeshConfig, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return &meshv1alpha1.MeshConfig{}, nil
	}
	mc, _, err := meshconfig.UnmarshalJSON(raw, true)
	if err != nil {
		return nil, fmt.Errorf("meshConfig: %w", err)
	}
	return mc, nil
}

// CheckMeshConfig applies the injector's rules to a mesh configuration it
// is to read (Params.Mesh): its trust domain and default ProxyConfig end
// up in every injected pod.
func CheckMeshConfig(mc *meshv1alpha1.MeshConfig) error {
	if mc.GetTrustDomain() != "" {
		if err := validateTrustDomain(mc.GetTrustDomain()); err != nil {
			return fmt.Errorf("trustDomain: %w", err)
		}
	}
	if pc := mc.GetDefaultConfig(); pc != nil {
		if err := checkProxyConfig(pc); err != nil {
			return fmt.Errorf("defaultConfig: %w", err)
		}
	}
	return nil
}

// validate checks every value that ends up in the injected pod.
func (v *Values) validate() error {
	g := &v.Global
	checks := []struct {
		name string
		err  error
	}{
		{"global.hub", validateImage(g.Hub + "/x")},
		{"global.tag", validateTag(string(g.Tag))},
		{"global.proxy.image", validateImage(v.ProxyImage())},
		{"global.proxy_init.image", validateImage(v.InitImage())},
		{"global.imagePullPolicy", validatePullPolicy(g.ImagePullPolicy)},
		{"global.istioNamespace", validateDNSLabel(g.IstioNamespace)},
		{"revision", validateRevision(v.Revision)},
		{"global.caAddress", validateHostPort(g.CAAddress, true)},
		{"global.pilotCertProvider", validateOneOf(g.PilotCertProvider, "istiod")},
		{"global.proxy.logLevel", validateLogLevel(g.Proxy.LogLevel)},
		{"global.proxy.componentLogLevel", validateComponentLevels(g.Proxy.ComponentLogLevel)},
		{"global.logging.level", validateComponentLevels(g.Logging.Level)},
		{"global.proxy.clusterDomain", validateDNSName(g.Proxy.ClusterDomain)},
		{"global.proxy.statusPort", validatePortNumber(g.Proxy.StatusPort)},
		{"global.proxy.includeIPRanges", errOnly(normalizeCIDRs(g.Proxy.IncludeIPRanges, true))},
		{"global.proxy.excludeIPRanges", errOnly(normalizeCIDRs(g.Proxy.ExcludeIPRanges, false))},
		{"global.proxy.includeInboundPorts", errOnly(normalizePorts(g.Proxy.IncludeInboundPorts, true))},
		{"global.proxy.excludeInboundPorts", errOnly(normalizePorts(g.Proxy.ExcludeInboundPorts, false))},
		{"global.proxy.excludeOutboundPorts", errOnly(normalizePorts(g.Proxy.ExcludeOutboundPorts, false))},
		{"global.proxy.resources", validateResources(g.Proxy.Resources)},
		{"global.proxy.privileged", boolMustBe(g.Proxy.Privileged, false)},
		{"sidecarInjectorWebhook.enableNamespacesByDefault", boolMustBe(v.SidecarInjectorWebhook.EnableNamespacesByDefault, false)},
		{"global.meshID", validateLabelValue(g.MeshID)},
		{"global.network", validateLabelValue(g.Network)},
		{"global.multiCluster.clusterName", validateLabelValue(g.MultiCluster.ClusterName)},
		{"global.trustDomain", validateTrustDomain(v.TrustDomain())},
		{"global.sds.token.aud", validateAudience(g.SDS.Token.Aud)},
	}
	for _, s := range g.ImagePullSecrets {
		checks = append(checks, struct {
			name string
			err  error
		}{"global.imagePullSecrets", validateDNSName(s)})
	}
	for _, c := range checks {
		if c.err != nil {
			return fmt.Errorf("values %s: %w", c.name, c.err)
		}
	}
	for _, n := range []struct {
		name string
		v    int32
	}{
		{"readinessInitialDelaySeconds", g.Proxy.ReadinessInitialDelaySeconds},
		{"readinessPeriodSeconds", g.Proxy.ReadinessPeriodSeconds},
		{"readinessFailureThreshold", g.Proxy.ReadinessFailureThreshold},
		{"startupProbe.failureThreshold", g.Proxy.StartupProbe.FailureThreshold},
	} {
		if n.v < 0 {
			return fmt.Errorf("values global.proxy.%s: must not be negative", n.name)
		}
	}
	return nil
}

func errOnly(_ string, err error) error { return err }

func boolMustBe(got, want bool) error {
	if got != want {
		return fmt.Errorf("only %t is supported", want)
	}
	return nil
}
