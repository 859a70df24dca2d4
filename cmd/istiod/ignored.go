package main

import (
	"strconv"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
)

// notRead are environment variables of Istio's istiod, of its
// multi-cluster and multi-network settings, that istiod does not read,
// each with what istiod does instead. falseIsOurs: the value false asks
// Istio for what istiod does anyway, and is not reported.
var notRead = []struct {
	name, instead string
	falseIsOurs   bool
}{
	{name: "PILOT_ENABLE_REMOTE_CREDENTIALS_CONTROLLER", instead: "Istio's switch for reading remote clusters' credentialName Secrets " +
		"(off: the config cluster's are used); istiod serves a remote cluster's proxy its own cluster's Secrets, checked there, " +
		"when that cluster's reader may read them (chart value global.readerSecrets), and never another cluster's"},
	{name: "PILOT_MULTICLUSTER_KUBECONFIG_PATH", instead: "remote clusters are read from remote secrets alone " +
		"(label istio/multiCluster=true in istiod's namespace), not from kubeconfig files"},
	{name: "LOCAL_CLUSTER_SECRET_WATCHER", instead: "remote secrets are read in istiod's own cluster, which is its config cluster; " +
		"a config cluster of its own is not supported", falseIsOurs: true},
	{name: "PILOT_INSECURE_MULTICLUSTER_KUBECONFIG_OPTIONS", instead: "a remote secret's kubeconfig with exec, an auth provider, " +
		"or a token, key or certificate file is always refused"},
	{name: "PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", instead: "Gateway API Gateways labelled topology.istio.io/network " +
		"are not network gateways; label a Service or use meshNetworks", falseIsOurs: true},
	{name: "RESOLVE_HOSTNAME_GATEWAYS", instead: "a network gateway whose address is a DNS name is left out, never resolved " +
		"in istiod", falseIsOurs: true},
	{name: "PILOT_ENABLE_CROSS_CLUSTER_WORKLOAD_ENTRY", instead: "WorkloadEntries are read in istiod's own cluster only; " +
		"no Istio object of a remote cluster is read", falseIsOurs: true},
}

// ignoredSettings are the variables of notRead that getenv sets, to a
// value that asks for something istiod does not do.
func ignoredSettings(getenv func(string) string) []bootstrap.IgnoredSetting {
	var out []bootstrap.IgnoredSetting
	for _, s := range notRead {
		v := getenv(s.name)
		if v == "" {
			continue
		}
		if b, err := strconv.ParseBool(v); err == nil && !b && s.falseIsOurs {
			continue
		}
		out = append(out, bootstrap.IgnoredSetting{Name: s.name, Instead: s.instead})
	}
	return out
}
