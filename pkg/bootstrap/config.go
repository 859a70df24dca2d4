// Package bootstrap wires istiod's components from a Config and runs them
// together.
package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Config is everything istiod needs to start. cmd/istiod fills it from
// flags and environment; nothing below reads either.
type Config struct {
	// Namespace istiod runs in (POD_NAMESPACE).
	Namespace string
	// TrustDomain of the mesh; workload identities are spiffe://<TrustDomain>/ns/<ns>/sa/<sa>.
	TrustDomain string
	// Kubeconfig is a kubeconfig path; with InCluster, it selects Kubernetes mode.
	Kubeconfig string
	InCluster  bool
	ClusterID  string
	Revision   string
	// IgnoredSettings are settings of Istio's istiod it was given and does
	// not read: each is logged at start and is a series of the gauge
	// bulwark_ignored_setting{name}.
	IgnoredSettings []IgnoredSetting
	// ClusterAliases are old cluster IDs standing for current ones
	// (Istio's --clusterAliases): a ClusterID header or node metadata
	// CLUSTER_ID naming an alias is the aliased cluster's.
	ClusterAliases authn.ClusterAliases
	// PodName names this replica in leader election (POD_NAME); empty
	// means the host name.
	PodName string
	// Version is istiod's version, as istioctl shows it.
	Version string

	// StateDir keeps the self-signed CA in local mode.
	StateDir string
	// CACertsDir holds a plugged-in CA (Istio's cacerts layout); watched.
	CACertsDir string
	CAKeyType  string
	RootTTL    time.Duration
	// DefaultCertTTL and MaxCertTTL bound workload certificates.
	DefaultCertTTL time.Duration
	MaxCertTTL     time.Duration

	SecureGRPCAddr string
	GRPCAddr       string
	HTTPAddr       string
	HTTPSAddr      string
	MonitoringAddr string

	// JWTRule is Istio's JWT_RULE: an OIDC issuer whose tokens authenticate callers.
	JWTRule string
	// JWTCAFile is a PEM bundle trusted when fetching the issuer's keys,
	// and the keys of RequestAuthentication issuers; empty means the
	// system roots, or the roots carried in the binary where the system
	// has none.
	JWTCAFile string
	// JWTFetchAllowedPrefixes are link-local, metadata or unspecified
	// addresses the issuer's keys (and RequestAuthentication key sets) may
	// nevertheless be fetched from.
	JWTFetchAllowedPrefixes []netip.Prefix
	// JWTKeysRefreshInterval is the least time between two fetches of the
	// issuer's keys, however many tokens name an unknown key; and how often
	// RequestAuthentication key sets are fetched again.
	JWTKeysRefreshInterval time.Duration
	// TokenAudiences are the audiences a Kubernetes token must carry.
	TokenAudiences []string
	// RequirePodBoundTokens refuses Kubernetes tokens not bound to a pod.
	RequirePodBoundTokens bool
	// RemoteClusterTimeout bounds how long readiness waits for each remote
	// cluster of the remote secrets present at startup to be read into the
	// model (Istio's PILOT_REMOTE_CLUSTER_TIMEOUT); negative: no bound.
	// Zero: 30s.
	RemoteClusterTimeout time.Duration
	// ExternalIstiod lets istiod be the control plane of remote clusters
	// whose istiod namespace is annotated topology.istio.io/
	// controlPlaneClusters with its cluster ID or "*" (Istio's
	// EXTERNAL_ISTIOD, primary-remote): it writes istio-ca-root-cert and
	// the webhook caBundles there. Off, nothing is written into a remote
	// cluster.
	ExternalIstiod bool
	// ScopeGatewayToNamespace applies to a gateway pod only the Gateways
	// of its own namespace (Istio's PILOT_SCOPE_GATEWAY_TO_NAMESPACE).
	ScopeGatewayToNamespace bool
	// AllowInsecureSkipVerify lets DestinationRules originate TLS to
	// servers they do not verify (insecureSkipVerify: true).
	AllowInsecureSkipVerify bool
	// AllowLoopbackHTTPJWKS lets RequestAuthentications have their key
	// sets fetched over plain http from loopback hosts (their jwksUri, or
	// their issuer's discovery), istiod's own loopback ports among them;
	// the admission webhook then admits such rules too.
	AllowLoopbackHTTPJWKS bool
	// SidecarIngressTLS terminates the tls of Sidecar ingress listeners
	// (Istio's ENABLE_TLS_ON_SIDECAR_INGRESS).
	SidecarIngressTLS bool

	// ConfigDir holds the mesh model as Kubernetes-style YAML manifests
	// (Services, WorkloadEntries, Istio security resources); watched.
	ConfigDir string

	// MutatingWebhookName and ValidatingWebhookName are the webhook
	// configurations whose caBundle istiod keeps; empty means Istio's names
	// for the revision and namespace.
	MutatingWebhookName   string
	ValidatingWebhookName string

	// InjectConfigDir holds the injector's "config" and "values" files (the
	// istio-sidecar-injector ConfigMap as mounted); watched.
	InjectConfigDir string

	// MeshConfigFile is Istio's mesh configuration, the istio ConfigMap's
	// "mesh" key as mounted (Istio's --meshConfig); watched. A missing
	// file means Istio's defaults. Empty means MeshConfigPath's default.
	MeshConfigFile string
	// Mesh is the mesh configuration istiod starts with, as read from
	// MeshConfigFile; nil means the defaults. Its trust domain must be
	// TrustDomain: the CA cannot change trust domain while it runs.
	Mesh *meshv1alpha1.MeshConfig
	// NetworksConfigFile is meshNetworks, the istio ConfigMap's
	// "meshNetworks" key as mounted (Istio's --networksConfig); watched.
	// A missing file means no networks. Empty means NetworksConfigPath's
	// default.
	NetworksConfigFile string
	// MeshNetworks is meshNetworks as read from NetworksConfigFile; nil
	// means none.
	MeshNetworks *model.MeshNetworks

	// ExtraDNSNames are added to istiod's serving certificate.
	ExtraDNSNames []string
	// ServingCertTTL is the lifetime of istiod's serving certificate.
	ServingCertTTL time.Duration

	// CSRRateLimit is CSRs per second accepted across all callers, with CSRBurst.
	CSRRateLimit float64
	CSRBurst     int
	// MaxConnections bounds open connections on the secure gRPC port.
	MaxConnections int
	// MaxConcurrentStreams bounds streams per connection.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize bounds a gRPC message from a client, in bytes.
	MaxRecvMsgSize int
	// GracePeriod is how long in-flight RPCs may finish at shutdown.
	GracePeriod time.Duration

	// RootGracePercentile starts a rotation of the self-signed root when
	// less than this percentage of its life is left (negative: never).
	RootGracePercentile int
	// RootRotationGrace is the least time between a new root joining the
	// bundle and its key signing; RootRotationTimeout how long a rotation
	// waits for proxies that do not ACK it, after which it goes ahead only
	// with RootRotationProceedAfterTimeout.
	RootRotationGrace               time.Duration
	RootRotationTimeout             time.Duration
	RootRotationProceedAfterTimeout bool
	// RootRotationTick is how often a replica moves a rotation.
	RootRotationTick time.Duration
}

// Local-mode listeners bind to loopback; Kubernetes mode to all addresses,
// as Istio's pilot-discovery does.
const (
	localHost = "127.0.0.1"
)

// DefaultConfig returns the embedded default: local mode, state in ./.istiod.
func DefaultConfig() Config {
	return Config{
		Namespace:              "istio-system",
		TrustDomain:            "cluster.local",
		ClusterID:              "Kubernetes",
		StateDir:               ".istiod",
		CAKeyType:              string(ca.KeyTypeECDSAP256),
		RootTTL:                10 * 365 * 24 * time.Hour,
		DefaultCertTTL:         24 * time.Hour,
		MaxCertTTL:             90 * 24 * time.Hour,
		TokenAudiences:         []string{"istio-ca"},
		JWTKeysRefreshInterval: keyfetch.DefaultRefreshInterval,
		ServingCertTTL:         24 * time.Hour,
		CSRRateLimit:           10000,
		CSRBurst:               10000,
		MaxConnections:         20000,
		MaxConcurrentStreams:   128,
		MaxRecvMsgSize:         4 << 20,
		GracePeriod:            10 * time.Second,
		RootGracePercentile:    ca.DefaultRootGracePercentile,
		RootRotationGrace:      ca.DefaultRotationGrace,
		RootRotationTimeout:    ca.DefaultRotationTimeout,
		RootRotationTick:       ca.DefaultRotationTick,
	}
}

// KubernetesMode reports whether istiod talks to a Kubernetes API server.
func (c *Config) KubernetesMode() bool { return c.Kubeconfig != "" || c.InCluster }

// Default mesh configuration files: Istio's path in Kubernetes (its
// --meshConfig default, ./etc/istio/config/mesh, from the image's working
// directory /), a file of the state directory locally.
const (
	kubeMeshConfigFile  = "/etc/istio/config/mesh"
	localMeshConfigFile = "mesh.yaml"
	// kubeNetworksFile is where Istio's chart mounts meshNetworks.
	kubeNetworksFile  = "/etc/istio/config/meshNetworks"
	localNetworksFile = "meshNetworks.yaml"
)

// NetworksConfigPath is the meshNetworks file: as configured, else the
// ConfigMap's mount in Kubernetes, else meshNetworks.yaml in the state
// directory.
func (c *Config) NetworksConfigPath() string {
	switch {
	case c.NetworksConfigFile != "":
		return c.NetworksConfigFile
	case c.KubernetesMode():
		return kubeNetworksFile
	default:
		return filepath.Join(c.StateDir, localNetworksFile)
	}
}

// MeshConfigPath is the mesh configuration file: as configured, else the
// mode's default.
func (c *Config) MeshConfigPath() string {
	switch {
	case c.MeshConfigFile != "":
		return c.MeshConfigFile
	case c.KubernetesMode():
		return kubeMeshConfigFile
	default:
		return filepath.Join(c.StateDir, localMeshConfigFile)
	}
}

// MeshDefaults are the mesh configuration's defaults that depend on how
// istiod runs: its trust domain, and its namespace as the root namespace.
func (c *Config) MeshDefaults() meshconfig.Defaults {
	return meshconfig.Defaults{TrustDomain: c.TrustDomain, RootNamespace: c.Namespace}
}

// setDefaults fills the addresses and directories that depend on the mode.
func (c *Config) setDefaults() {
	host := localHost
	if c.KubernetesMode() {
		host = ""
	}
	orDefault := func(s *string, port string) {
		if *s == "" {
			*s = net.JoinHostPort(host, port)
		}
	}
	orDefault(&c.SecureGRPCAddr, "15012")
	orDefault(&c.HTTPAddr, "8080")
	orDefault(&c.MonitoringAddr, "15014")
	orDefault(&c.HTTPSAddr, "15017")
	c.MeshConfigFile = c.MeshConfigPath()
	if c.ConfigDir == "" && !c.KubernetesMode() {
		c.ConfigDir = filepath.Join(c.StateDir, "config")
	}
	if c.InjectConfigDir == "" {
		if c.KubernetesMode() {
			c.InjectConfigDir = "/var/lib/istio/inject"
		} else {
			c.InjectConfigDir = filepath.Join(c.StateDir, "inject")
		}
	}
	if c.CACertsDir == "" {
		if c.KubernetesMode() {
			c.CACertsDir = "/etc/cacerts"
		} else {
			c.CACertsDir = filepath.Join(c.StateDir, "cacerts")
		}
	}
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	if _, err := spiffeid.TrustDomainFromString(c.TrustDomain); err != nil {
		return fmt.Errorf("trust domain %q: %w", c.TrustDomain, err)
	}
	if c.Namespace == "" {
		return errors.New("namespace is required")
	}
	if err := c.ClusterAliases.Validate(c.ClusterID); err != nil {
		return err
	}
	if c.Mesh != nil {
		if err := meshconfig.Validate(c.Mesh); err != nil {
			return err
		}
		if c.Mesh.GetTrustDomain() != c.TrustDomain {
			return fmt.Errorf("mesh config trustDomain %q is not the trust domain %q", c.Mesh.GetTrustDomain(), c.TrustDomain)
		}
	}
	if c.StateDir == "" {
		return errors.New("state dir is required")
	}
	if _, err := ca.ParseKeyType(c.CAKeyType); err != nil {
		return fmt.Errorf("ca key type: %w", err)
	}
	if c.DefaultCertTTL <= 0 || c.MaxCertTTL < c.DefaultCertTTL {
		return fmt.Errorf("certificate ttl: default %v must be positive and not above max %v", c.DefaultCertTTL, c.MaxCertTTL)
	}
	if c.RootTTL <= c.MaxCertTTL {
		return fmt.Errorf("root ttl %v must exceed the maximum certificate ttl %v", c.RootTTL, c.MaxCertTTL)
	}
	if c.JWTRule != "" {
		if _, err := authn.ParseJWTRule(c.JWTRule); err != nil {
			return fmt.Errorf("jwt rule: %w", err)
		}
	}
	if c.JWTKeysRefreshInterval < 0 {
		return errors.New("jwt keys refresh interval must not be negative")
	}
	if len(c.TokenAudiences) == 0 {
		return errors.New("at least one token audience is required")
	}
	if c.MaxRecvMsgSize <= 0 || c.MaxConcurrentStreams == 0 || c.MaxConnections <= 0 {
		return errors.New("gRPC limits must be positive")
	}
	if c.GracePeriod < 0 {
		return errors.New("grace period must not be negative")
	}
	for name, addr := range map[string]string{"secureGRPCAddr": c.SecureGRPCAddr, "grpcAddr": c.GRPCAddr, "httpAddr": c.HTTPAddr, "httpsAddr": c.HTTPSAddr, "monitoringAddr": c.MonitoringAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: %w", name, addr, err)
		}
	}
	return nil
}

// revisionSuffix is "-<rev>" for a non-default revision, else empty.
func (c *Config) revisionSuffix() string {
	if c.Revision == "" || c.Revision == "default" {
		return ""
	}
	return "-" + c.Revision
}

// mutatingWebhookName is the injector's configuration: as configured, else
// Istio's name.
func (c *Config) mutatingWebhookName() string {
	if c.MutatingWebhookName != "" {
		return c.MutatingWebhookName
	}
	return "istio-sidecar-injector" + c.revisionSuffix()
}

// validatingWebhookName is the validator's configuration: as configured,
// else Istio's name.
func (c *Config) validatingWebhookName() string {
	if c.ValidatingWebhookName != "" {
		return c.ValidatingWebhookName
	}
	return "istio-validator" + c.revisionSuffix() + "-" + c.Namespace
}

// dnsNames are istiod's serving certificate names, as Istio's agents dial it.
func (c *Config) dnsNames() []string {
	svc := "istiod" + c.revisionSuffix()
	names := []string{
		svc + "." + c.Namespace + ".svc",
		svc + "." + c.Namespace + ".svc.cluster.local",
		"istio-pilot." + c.Namespace + ".svc",
		"localhost",
	}
	return append(names, c.ExtraDNSNames...)
}
