package bootstrap

import (
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Config)
		want   string // substring of the error; empty means valid
	}{
		"the default is valid":                            {mutate: func(*Config) {}},
		"a bad trust domain is refused":                   {mutate: func(c *Config) { c.TrustDomain = "Not A Domain" }, want: "trust domain"},
		"an unknown key type is refused":                  {mutate: func(c *Config) { c.CAKeyType = "rsa-1024" }, want: "key type"},
		"a default ttl above the max is wrong":            {mutate: func(c *Config) { c.DefaultCertTTL = 100 * 24 * time.Hour }, want: "ttl"},
		"a root shorter than a leaf is refused":           {mutate: func(c *Config) { c.RootTTL = time.Hour }, want: "root ttl"},
		"a malformed jwt rule is refused":                 {mutate: func(c *Config) { c.JWTRule = `{"issuer":` }, want: "jwt rule"},
		"a negative jwt keys refresh interval is refused": {mutate: func(c *Config) { c.JWTKeysRefreshInterval = -time.Second }, want: "refresh interval"},
		"token audiences are required":                    {mutate: func(c *Config) { c.TokenAudiences = nil }, want: "audience"},
		"an address needs a port":                         {mutate: func(c *Config) { c.SecureGRPCAddr = "127.0.0.1" }, want: "secureGRPCAddr"},
		"the plaintext address needs a port":              {mutate: func(c *Config) { c.GRPCAddr = "15010" }, want: "grpcAddr"},
		"zero limits are refused":                         {mutate: func(c *Config) { c.MaxRecvMsgSize = 0 }, want: "limits"},
		"a mesh config of the trust domain is valid": {mutate: func(c *Config) {
			c.Mesh = meshconfig.Default(meshconfig.Defaults{TrustDomain: c.TrustDomain})
		}},
		"a mesh config of another trust domain is refused": {mutate: func(c *Config) {
			c.Mesh = meshconfig.Default(meshconfig.Defaults{TrustDomain: "other.org"})
		}, want: "mesh config trustDomain"},
		"an invalid mesh config is refused": {mutate: func(c *Config) {
			c.Mesh = meshconfig.Default(meshconfig.Defaults{TrustDomain: c.TrustDomain})
			c.Mesh.RootNamespace = "Not A Namespace"
		}, want: "rootNamespace"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestDefaultsDependOnMode(t *testing.T) {
	local := DefaultConfig()
	local.setDefaults()
	if local.SecureGRPCAddr != "127.0.0.1:15012" || local.HTTPAddr != "127.0.0.1:8080" || local.MonitoringAddr != "127.0.0.1:15014" {
		t.Errorf("local mode listens on %s %s %s, want loopback", local.SecureGRPCAddr, local.HTTPAddr, local.MonitoringAddr)
	}
	if local.CACertsDir != ".istiod/cacerts" {
		t.Errorf("local cacerts dir = %q", local.CACertsDir)
	}

	kube := DefaultConfig()
	kube.InCluster = true
	kube.setDefaults()
	if kube.SecureGRPCAddr != ":15012" || kube.CACertsDir != "/etc/cacerts" {
		t.Errorf("kubernetes mode: %s, %s", kube.SecureGRPCAddr, kube.CACertsDir)
	}
	if local.MeshConfigFile != ".istiod/mesh.yaml" || kube.MeshConfigFile != "/etc/istio/config/mesh" {
		t.Errorf("mesh config file: %q locally, %q in Kubernetes; want <state-dir>/mesh.yaml and Istio's path", local.MeshConfigFile, kube.MeshConfigFile)
	}
	if local.GRPCAddr != "" || kube.GRPCAddr != "" {
		t.Errorf("plaintext xDS is on by default: %q locally, %q in Kubernetes", local.GRPCAddr, kube.GRPCAddr)
	}
}

func TestServingNamesFollowNamespaceAndRevision(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Namespace, cfg.Revision, cfg.ExtraDNSNames = "mesh", "canary", []string{"istiod.example.com"}
	got := strings.Join(cfg.dnsNames(), ",")
	want := "istiod-canary.mesh.svc,istiod-canary.mesh.svc.cluster.local,istio-pilot.mesh.svc,localhost,istiod.example.com"
	if got != want {
		t.Errorf("dns names = %s, want %s", got, want)
	}
}

func TestWebhookNamesDefaultToIstiosAndCanBeSet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Revision = "canary"
	if got := cfg.mutatingWebhookName(); got != "istio-sidecar-injector-canary" {
		t.Errorf("mutating = %s", got)
	}
	if got := cfg.validatingWebhookName(); got != "istio-validator-canary-istio-system" {
		t.Errorf("validating = %s", got)
	}
	cfg.MutatingWebhookName, cfg.ValidatingWebhookName = "inj-x", "val-x"
	if cfg.mutatingWebhookName() != "inj-x" || cfg.validatingWebhookName() != "val-x" {
		t.Error("configured names are not used")
	}
}
