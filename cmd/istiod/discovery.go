package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
)

// discovery runs the control plane until ctx is cancelled.
func discovery(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("discovery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	logFormat, logLevel := addLogFlags(fs)
	addCommonFlags(fs, &cfg, getenv)
	fs.StringVar(&cfg.Namespace, "namespace", envOr(getenv, "POD_NAMESPACE", cfg.Namespace), "istiod's namespace (env POD_NAMESPACE)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig file; empty and outside a cluster means local mode (env KUBECONFIG)")
	fs.StringVar(&cfg.ClusterID, "clusterID", envOr(getenv, "CLUSTER_ID", cfg.ClusterID), "cluster ID (env CLUSTER_ID)")
	aliases := fs.String("clusterAliases", "", "old cluster IDs standing for current ones, as Istio's --clusterAliases: alias1=cluster1,alias2=cluster2; a ClusterID header or node metadata CLUSTER_ID naming an alias is the aliased cluster's (its token reviewed there, its proxy bound to it); at most 64, one per cluster, IDs of letters, digits, '-', '_' and '.'")
	fs.StringVar(&cfg.NetworksConfigFile, "networksConfig", "", "Istio's meshNetworks (the istio ConfigMap's meshNetworks key as a file), watched: a change applies without a restart, a bad one is refused and the last good one kept; a missing file means no networks (default /etc/istio/config/meshNetworks in Kubernetes, <state-dir>/meshNetworks.yaml locally)")
	fs.StringVar(&cfg.Revision, "revision", getenv("REVISION"), "control-plane revision (env REVISION)")
	fs.StringVar(&cfg.SecureGRPCAddr, "secureGRPCAddr", "", "TLS gRPC address: CSR API and xDS (default 127.0.0.1:15012 locally, :15012 in Kubernetes)")
	fs.StringVar(&cfg.GRPCAddr, "grpcAddr", "", "plaintext xDS address (default off)")
	fs.StringVar(&cfg.HTTPAddr, "httpAddr", "", "HTTP address of /ready (default 127.0.0.1:8080 locally, :8080 in Kubernetes)")
	fs.StringVar(&cfg.HTTPSAddr, "httpsAddr", "", "HTTPS address of the admission webhooks (default 127.0.0.1:15017 locally, :15017 in Kubernetes)")
	fs.StringVar(&cfg.ConfigDir, "configDir", "", "mesh model as YAML manifests (Services, WorkloadEntries, Istio security resources), watched; when given, the model comes from these files in either mode (default <state-dir>/config locally; in Kubernetes, the API server's Services, EndpointSlices, Pods and Istio resources)")
	fs.StringVar(&cfg.MutatingWebhookName, "injection-webhook-config-name", getenv("INJECTION_WEBHOOK_CONFIG_NAME"), "MutatingWebhookConfiguration whose caBundle istiod keeps (env INJECTION_WEBHOOK_CONFIG_NAME; default istio-sidecar-injector[-<rev>])")
	fs.StringVar(&cfg.ValidatingWebhookName, "validation-webhook-config-name", getenv("VALIDATION_WEBHOOK_CONFIG_NAME"), "ValidatingWebhookConfiguration whose caBundle istiod keeps (env VALIDATION_WEBHOOK_CONFIG_NAME; default istio-validator[-<rev>]-<ns>)")
	fs.StringVar(&cfg.InjectConfigDir, "inject-config-dir", "", "injector config and values files, watched (default <state-dir>/inject locally, /var/lib/istio/inject in Kubernetes)")
	fs.StringVar(&cfg.MonitoringAddr, "monitoringAddr", "", "HTTP address of /metrics (default 127.0.0.1:15014 locally, :15014 in Kubernetes)")
	fs.StringVar(&cfg.JWTRule, "jwt-rule", getenv("JWT_RULE"), `OIDC issuer trusted for caller JWTs, as JSON {"issuer","jwks_uri","audiences"} (env JWT_RULE)`)
	fs.StringVar(&cfg.JWTCAFile, "jwt-ca-file", "", "PEM roots trusted when fetching the JWT issuer's keys and RequestAuthentication key sets (default: system roots, or the roots built into istiod where the system has none)")
	jwtAllowed := fs.String("jwt-fetch-allowed-cidrs", "", "link-local, cloud-metadata or unspecified addresses the JWT issuer's keys and RequestAuthentication key sets may nevertheless be fetched from, as comma-separated CIDRs (default: none)")
	fs.DurationVar(&cfg.JWTKeysRefreshInterval, "jwt-keys-refresh-interval", cfg.JWTKeysRefreshInterval, "least time between two fetches of the JWT issuer's keys, however many tokens name a key not held; how often RequestAuthentication key sets are fetched again")
	audiences := fs.String("token-audiences", envOr(getenv, "TOKEN_AUDIENCES", strings.Join(cfg.TokenAudiences, ",")), "audiences a Kubernetes token must carry, comma-separated (env TOKEN_AUDIENCES)")
	fs.BoolVar(&cfg.RequirePodBoundTokens, "require-pod-bound-tokens", false, "refuse Kubernetes tokens that are not bound to a pod")
	fs.BoolVar(&cfg.AllowInsecureSkipVerify, "allow-insecure-skip-verify", false, "let DestinationRules originate TLS without verifying the server (insecureSkipVerify: true); default: such a rule's cluster gets no endpoints")
	fs.BoolVar(&cfg.AllowLoopbackHTTPJWKS, "allow-loopback-http-jwks", false, "let RequestAuthentications have their key sets fetched over plain http from loopback hosts (jwksUri, or the issuer's discovery), istiod's own ports among them; default: the webhook refuses such rules and their issuers' tokens are refused")
	remoteTimeout, remoteTimeoutErr := time.ParseDuration(envOr(getenv, "PILOT_REMOTE_CLUSTER_TIMEOUT", "30s"))
	fs.DurationVar(&cfg.RemoteClusterTimeout, "remote-cluster-timeout", remoteTimeout, "how long istiod's readiness waits for each remote cluster of the remote secrets present at startup to be read, as Istio's PILOT_REMOTE_CLUSTER_TIMEOUT (env PILOT_REMOTE_CLUSTER_TIMEOUT); 0: as long as it takes")
	scopeGateways, scopeGatewaysErr := strconv.ParseBool(envOr(getenv, "PILOT_SCOPE_GATEWAY_TO_NAMESPACE", "false"))
	fs.BoolVar(&cfg.ScopeGatewayToNamespace, "scope-gateway-to-namespace", scopeGateways, "apply to a gateway pod only the Gateways of its own namespace, as Istio's PILOT_SCOPE_GATEWAY_TO_NAMESPACE (env PILOT_SCOPE_GATEWAY_TO_NAMESPACE); default: a Gateway of any namespace whose selector matches the pod applies, as in Istio")
	external, externalErr := strconv.ParseBool(envOr(getenv, "EXTERNAL_ISTIOD", "false"))
	fs.BoolVar(&cfg.ExternalIstiod, "external-istiod", external, "be the control plane of the remote clusters whose istiod namespace is annotated topology.istio.io/controlPlaneClusters with this cluster ID or *: write istio-ca-root-cert into their namespaces (leader election there) and keep their webhook configurations' caBundle, as Istio's EXTERNAL_ISTIOD (env EXTERNAL_ISTIOD); default: nothing is written into a remote cluster")
	ingressTLS, ingressTLSErr := strconv.ParseBool(envOr(getenv, "ENABLE_TLS_ON_SIDECAR_INGRESS", "false"))
	fs.BoolVar(&cfg.SidecarIngressTLS, "tls-on-sidecar-ingress", ingressTLS, "terminate the tls of a Sidecar's ingress listener on its port, as Istio's ENABLE_TLS_ON_SIDECAR_INGRESS (env ENABLE_TLS_ON_SIDECAR_INGRESS); default: such a port is served as without tls, as in Istio")
	extraNames := fs.String("serving-dns-names", "", "extra DNS names for istiod's serving certificate, comma-separated")
	fs.DurationVar(&cfg.DefaultCertTTL, "workload-cert-ttl", cfg.DefaultCertTTL, "default workload certificate lifetime")
	fs.DurationVar(&cfg.MaxCertTTL, "max-workload-cert-ttl", cfg.MaxCertTTL, "longest workload certificate lifetime a caller may ask for")
	fs.DurationVar(&cfg.RootTTL, "root-ttl", cfg.RootTTL, "lifetime of a self-signed root")
	fs.StringVar(&cfg.CAKeyType, "ca-key-type", cfg.CAKeyType, "self-signed root key: ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072 or rsa-4096")
	fs.Float64Var(&cfg.CSRRateLimit, "csr-rate-limit", cfg.CSRRateLimit, "CSRs per second accepted across all callers (0: unlimited)")
	fs.IntVar(&cfg.CSRBurst, "csr-burst", cfg.CSRBurst, "CSR rate limiter burst")
	fs.IntVar(&cfg.MaxConnections, "max-connections", cfg.MaxConnections, "open connections accepted on the secure gRPC port")
	fs.DurationVar(&cfg.GracePeriod, "grace-period", cfg.GracePeriod, "time in-flight RPCs get to finish at shutdown")
	addRotationFlags(fs, &cfg, getenv)
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if scopeGatewaysErr != nil && !flagSet(fs, "scope-gateway-to-namespace") {
		return usageError{fmt.Errorf("PILOT_SCOPE_GATEWAY_TO_NAMESPACE: %w", scopeGatewaysErr)}
	}
	if remoteTimeoutErr != nil && !flagSet(fs, "remote-cluster-timeout") {
		return usageError{fmt.Errorf("PILOT_REMOTE_CLUSTER_TIMEOUT: %w", remoteTimeoutErr)}
	}
	switch {
	case cfg.RemoteClusterTimeout < 0:
		return usageError{fmt.Errorf("remote-cluster-timeout: %v is negative", cfg.RemoteClusterTimeout)}
	case cfg.RemoteClusterTimeout == 0:
		cfg.RemoteClusterTimeout = -1 // as long as it takes
	}
	if externalErr != nil && !flagSet(fs, "external-istiod") {
		return usageError{fmt.Errorf("EXTERNAL_ISTIOD: %w", externalErr)}
	}
	if ingressTLSErr != nil && !flagSet(fs, "tls-on-sidecar-ingress") {
		return usageError{fmt.Errorf("ENABLE_TLS_ON_SIDECAR_INGRESS: %w", ingressTLSErr)}
	}
	cfg.InCluster = cfg.Kubeconfig == "" && getenv("KUBERNETES_SERVICE_HOST") != ""
	cfg.PodName = getenv("POD_NAME")
	cfg.Version = version
	cfg.TokenAudiences = splitList(*audiences)
	aliasesSet, err := clusterAliases(*aliases, cfg.ClusterID)
	if err != nil {
		return err
	}
	cfg.ClusterAliases = aliasesSet
	cfg.IgnoredSettings = ignoredSettings(getenv)
	cfg.ExtraDNSNames = splitList(*extraNames)
	allowed, err := parsePrefixes(*jwtAllowed)
	if err != nil {
		return usageError{fmt.Errorf("jwt-fetch-allowed-cidrs: %w", err)}
	}
	cfg.JWTFetchAllowedPrefixes = allowed
	if err := loadMeshConfig(&cfg, trustDomainSet(fs, getenv), stderr); err != nil {
		return err
	}
	if err := loadMeshNetworks(&cfg); err != nil {
		return err
	}

	log, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	srv, err := bootstrap.New(cfg, log)
	if err != nil {
		return usageError{err}
	}
	if !cfg.KubernetesMode() {
		log.Info("local mode: get a client certificate with `istiod mint-cert --state-dir " + cfg.StateDir + " --namespace default --service-account demo --out-dir <dir>`")
	}
	return srv.Run(ctx)
}

// addRotationFlags are the root rotation's settings.
func addRotationFlags(fs *flag.FlagSet, cfg *bootstrap.Config, getenv func(string) string) {
	fs.IntVar(&cfg.RootGracePercentile, "root-grace-percentile", envInt(getenv, "CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", cfg.RootGracePercentile),
		"rotate the self-signed root when less than this percentage of its life is left; negative: never (env CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE)")
	fs.DurationVar(&cfg.RootRotationGrace, "root-rotation-grace", cfg.RootRotationGrace, "least time a new root is in the trust bundle before its key signs")
	fs.DurationVar(&cfg.RootRotationTimeout, "root-rotation-timeout", cfg.RootRotationTimeout, "how long a root rotation waits for proxies that do not take the new root")
	fs.BoolVar(&cfg.RootRotationProceedAfterTimeout, "root-rotation-proceed-after-timeout", false, "after --root-rotation-timeout, let the new key sign although named proxies lack its root (default: keep waiting)")
	fs.DurationVar(&cfg.RootRotationTick, "root-rotation-tick", cfg.RootRotationTick, "how often a replica moves a root rotation")
}

// envInt is the integer in env key, else def; a malformed value is def,
// and the flag's own parsing reports a malformed flag.
func envInt(getenv func(string) string, key string, def int) int {
	if n, err := strconv.Atoi(getenv(key)); err == nil {
		return n
	}
	return def
}

// addCommonFlags are shared by discovery and mint-cert, so both find the same CA.
func addCommonFlags(fs *flag.FlagSet, cfg *bootstrap.Config, getenv func(string) string) {
	fs.StringVar(&cfg.TrustDomain, "trust-domain", envOr(getenv, "TRUST_DOMAIN", cfg.TrustDomain), "mesh trust domain (env TRUST_DOMAIN); the mesh config's trustDomain when that is set, and both must agree when both are")
	fs.StringVar(&cfg.MeshConfigFile, "meshConfig", "", "Istio's mesh configuration (the istio ConfigMap's mesh key as a file), watched; a missing file means Istio's defaults (default /etc/istio/config/mesh in Kubernetes, <state-dir>/mesh.yaml locally)")
	fs.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory of the local CA's key and root (local mode)")
	fs.StringVar(&cfg.CACertsDir, "cacerts-dir", "", "plugged-in CA directory, watched (default <state-dir>/cacerts locally, /etc/cacerts in Kubernetes)")
}

func addLogFlags(fs *flag.FlagSet) (format, level *string) {
	format = fs.String("log-format", "text", "log format: text or json")
	level = fs.String("log-level", "info", "log level: debug, info, warn or error")
	return format, level
}

func parseErr(err error) error {
	if err == flag.ErrHelp {
		return err
	}
	return usageError{err}
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// parsePrefixes parses comma-separated CIDRs.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range splitList(s) {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, err
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// clusterAliases reads --clusterAliases for istiod's cluster own.
func clusterAliases(value, own string) (authn.ClusterAliases, error) {
	a, err := authn.ParseClusterAliases(value)
	if err == nil {
		err = a.Validate(own)
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("clusterAliases: %w", err)}
	}
	return a, nil
}
