package sds

import (
	"strings"
)

// Resource names as Istio's gateways and sidecars ask for them.
const (
	// RootCAName is the trust bundle's resource name.
	RootCAName = "ROOTCA"
	// KubernetesPrefix starts the name of a credentialName secret:
	// "kubernetes://<name>" (the proxy's namespace) or
	// "kubernetes://<namespace>/<name>".
	KubernetesPrefix = "kubernetes://"
	// CACertSuffix ends the name of the CA-only part of a secret.
	CACertSuffix = "-cacert"
)

// secretRef is a parsed credentialName resource name.
type secretRef struct {
	resource  string // the name asked for
	namespace string
	name      string // the Kubernetes Secret's name, suffix included
	caOnly    bool
}

// parseName parses a kubernetes:// resource name; a name without a
// namespace is in proxyNS. It reports false for other names.
func parseName(resource, proxyNS string) (secretRef, bool) {
	rest, ok := strings.CutPrefix(resource, KubernetesPrefix)
	if !ok || rest == "" {
		return secretRef{}, false
	}
	ref := secretRef{resource: resource, namespace: proxyNS, name: rest}
	if ns, name, found := strings.Cut(rest, "/"); found {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return secretRef{}, false
		}
		ref.namespace, ref.name = ns, name
	}
	ref.caOnly = strings.HasSuffix(ref.name, CACertSuffix) && len(ref.name) > len(CACertSuffix)
	return ref, true
}

// candidates are the Secrets that may hold ref, in order: a CA-only name
// is looked up as written, then without its suffix, as Istio does.
func (r secretRef) candidates() []string {
	if r.caOnly {
		return []string{r.name, strings.TrimSuffix(r.name, CACertSuffix)}
	}
	return []string{r.name}
}
