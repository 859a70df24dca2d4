package multicluster

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MaxKubeconfigSize bounds one kubeconfig of a remote secret, in bytes. A
// kubeconfig with a CA bundle and a token is a few KiB.
const MaxKubeconfigSize = 256 << 10

// remoteRequestTimeout bounds every request to a remote API server, so that
// a remote that accepts connections and never answers holds nothing up for
// long.
const remoteRequestTimeout = 10 * time.Second

// ErrUnsafeKubeconfig: a remote secret's kubeconfig asks for something a
// remote cluster's credentials must not do: run a command, read a local
// file, use an auth-provider plugin, skip TLS verification.
var ErrUnsafeKubeconfig = errors.New("unsafe kubeconfig")

// ErrInvalidKubeconfig: a remote secret's kubeconfig cannot be parsed or
// does not name a usable cluster.
var ErrInvalidKubeconfig = errors.New("invalid kubeconfig")

// RESTConfig turns a remote secret's kubeconfig into a client configuration
// for its current context, refusing every field that would make istiod run a
// command or read a local file (whose contents an attacker-chosen server
// would then receive): exec, auth providers (all of them, oidc included:
// its refresh reads idp-certificate-authority from a path), tokenFile,
// client-certificate, client-key, certificate-authority paths. TLS
// verification cannot be turned off and the server must be https. The
// client configuration is built field by field from the parsed kubeconfig,
// so a field added to kubeconfigs later is ignored until reviewed.
func RESTConfig(data []byte) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("kubeconfig is empty: %w", ErrInvalidKubeconfig)
	}
	if len(data) > MaxKubeconfigSize {
		return nil, fmt.Errorf("kubeconfig of %d bytes, limit %d: %w", len(data), MaxKubeconfigSize, ErrInvalidKubeconfig)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w: %w", ErrInvalidKubeconfig, err)
	}
	// Every entry is checked, not only the current context's: a kubeconfig
	// that holds a dangerous one is refused whole.
	for name, a := range cfg.AuthInfos {
		if err := checkAuthInfo(a); err != nil {
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
	}
	for name, c := range cfg.Clusters {
		if err := checkCluster(c); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", name, err)
		}
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext == "" || !ok || kctx == nil {
		return nil, fmt.Errorf("current context %q not found: %w", cfg.CurrentContext, ErrInvalidKubeconfig)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return nil, fmt.Errorf("cluster %q of context %q not found: %w", kctx.Cluster, cfg.CurrentContext, ErrInvalidKubeconfig)
	}
	auth, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || auth == nil {
		return nil, fmt.Errorf("user %q of context %q not found: %w", kctx.AuthInfo, cfg.CurrentContext, ErrInvalidKubeconfig)
	}
	u, err := url.Parse(cluster.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server %q is not an https URL: %w", cluster.Server, ErrInvalidKubeconfig)
	}
	rc := &rest.Config{
		Host: cluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: cluster.TLSServerName,
			CAData:     cluster.CertificateAuthorityData,
			CertData:   auth.ClientCertificateData,
			KeyData:    auth.ClientKeyData,
		},
		BearerToken: auth.Token,
		Username:    auth.Username,
		Password:    auth.Password,
		Timeout:     remoteRequestTimeout,
		QPS:         20,
		Burst:       40,
	}
	return rc, nil
}

// checkAuthInfo refuses the user fields that run code, read files or hand
// credentials to a plugin.
func checkAuthInfo(a *clientcmdapi.AuthInfo) error {
	if a == nil {
		return nil
	}
	switch {
	case a.Exec != nil:
		return fmt.Errorf("exec is not allowed: %w", ErrUnsafeKubeconfig)
	case a.AuthProvider != nil:
		return fmt.Errorf("auth provider %q is not allowed: %w", a.AuthProvider.Name, ErrUnsafeKubeconfig)
	case a.TokenFile != "":
		return fmt.Errorf("tokenFile is not allowed: %w", ErrUnsafeKubeconfig)
	case a.ClientCertificate != "":
		return fmt.Errorf("client-certificate (a path) is not allowed, use client-certificate-data: %w", ErrUnsafeKubeconfig)
	case a.ClientKey != "":
		return fmt.Errorf("client-key (a path) is not allowed, use client-key-data: %w", ErrUnsafeKubeconfig)
	case a.Impersonate != "" || len(a.ImpersonateGroups) > 0 || a.ImpersonateUID != "" || len(a.ImpersonateUserExtra) > 0:
		return fmt.Errorf("impersonation is not allowed: %w", ErrUnsafeKubeconfig)
	}
	return nil
}

// checkCluster refuses the cluster fields that read files or weaken TLS.
func checkCluster(c *clientcmdapi.Cluster) error {
	if c == nil {
		return nil
	}
	switch {
	case c.CertificateAuthority != "":
		return fmt.Errorf("certificate-authority (a path) is not allowed, use certificate-authority-data: %w", ErrUnsafeKubeconfig)
	case c.InsecureSkipTLSVerify:
		return fmt.Errorf("insecure-skip-tls-verify is not allowed: %w", ErrUnsafeKubeconfig)
	case c.ProxyURL != "":
		return fmt.Errorf("proxy-url is not allowed: %w", ErrUnsafeKubeconfig)
	}
	return nil
}
