package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

// loadMeshConfig reads the mesh configuration istiod starts with into cfg
// and makes its trust domain istiod's, as Istio's istiod takes the mesh
// config's. A trust domain given on the command line or in TRUST_DOMAIN
// must agree with it. A file that cannot be used stops istiod: starting
// on the defaults instead could quietly undo a setting such as
// REGISTRY_ONLY. The mode must be known (cfg.InCluster set) before.
func loadMeshConfig(cfg *bootstrap.Config, trustDomainSet bool, stderr io.Writer) error {
	path := cfg.MeshConfigPath()
	mc, warnings, err := meshconfig.ReadFile(path, cfg.MeshDefaults())
	if err != nil {
		return fmt.Errorf("mesh config: %w", err)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "istiod: mesh config %s: %s\n", path, w)
	}
	if trustDomainSet && mc.GetTrustDomain() != cfg.TrustDomain {
		return usageError{fmt.Errorf("--trust-domain %q and the trustDomain %q of mesh config %s differ: set one, or the same in both", cfg.TrustDomain, mc.GetTrustDomain(), path)}
	}
	cfg.TrustDomain = mc.GetTrustDomain()
	cfg.MeshConfigFile, cfg.Mesh = path, mc
	return nil
}

// trustDomainSet reports whether the trust domain was given explicitly.
func trustDomainSet(fs *flag.FlagSet, getenv func(string) string) bool {
	set := getenv("TRUST_DOMAIN") != ""
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "trust-domain" })
	return set
}

// loadMeshNetworks reads meshNetworks into cfg: a missing file is no
// networks; one that cannot be used stops istiod, as proxies would
// otherwise be sent other networks' endpoints they cannot reach. Later
// changes are watched (bootstrap).
func loadMeshNetworks(cfg *bootstrap.Config) error {
	path := cfg.NetworksConfigPath()
	nets, err := meshconfig.ReadNetworksFile(path)
	if err != nil {
		return fmt.Errorf("mesh networks: %w", err)
	}
	cfg.NetworksConfigFile, cfg.MeshNetworks = path, nets
	return nil
}
