// Package unsupportedtest helps tests install the CRDs of the kinds the
// unsupported-config reporter watches.
package unsupportedtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// ChartKinds are the kinds whose CRDs charts/istiod/crds holds, as Istio
// serves them; CRDs writes the others.
var ChartKinds = map[string]bool{
	"peerauthentications.security.istio.io":    true,
	"authorizationpolicies.security.istio.io":  true,
	"requestauthentications.security.istio.io": true,
	"destinationrules.networking.istio.io":     true,
}

// Versions are the versions the CRDs serve, the first the stored one, as
// Istio's and the Gateway API's CRDs serve them where one version is not
// v1; the reporter must find each kind at whichever version it is served.
var Versions = map[string][]string{
	"envoyfilters.networking.istio.io":                    {"v1alpha3"},
	"proxyconfigs.networking.istio.io":                    {"v1beta1"},
	"telemetries.telemetry.istio.io":                      {"v1", "v1alpha1"},
	"wasmplugins.extensions.istio.io":                     {"v1alpha1"},
	"trafficextensions.extensions.istio.io":               {"v1alpha1"},
	"tcproutes.gateway.networking.k8s.io":                 {"v1alpha2"},
	"udproutes.gateway.networking.k8s.io":                 {"v1alpha2"},
	"xbackendtrafficpolicies.gateway.networking.x-k8s.io": {"v1alpha1"},
}

// Version is the version a test writes objects of k in.
func Version(k policy.Kind) string {
	if v, ok := Versions[k.CRD()]; ok {
		return v[0]
	}
	return "v1"
}

// CRDs writes, in a file of t's temporary directory, a CustomResourceDefinition
// for each kind of package policy not in ChartKinds nor built into the API
// server, at Versions, and
// returns its path.
func CRDs(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for _, k := range policy.Kinds() {
		if ChartKinds[k.CRD()] || k.BuiltIn() {
			continue
		}
		versions := Versions[k.CRD()]
		if versions == nil {
			versions = []string{"v1"}
		}
		b.WriteString(CRD(k, versions...))
	}
	return WriteFile(t, b.String())
}

// CRD is a CustomResourceDefinition of k serving versions, the first
// stored. Its schema is open (any spec is stored): the reporter reads what
// an object holds as JSON, never through Istio's schema.
func CRD(k policy.Kind, versions ...string) string {
	scope := "Cluster"
	if k.Namespaced {
		scope = "Namespaced"
	}
	// A group of k8s.io needs an approved API, as the Gateway API's CRDs say.
	approved := ""
	if strings.HasSuffix(k.Group, ".k8s.io") {
		approved = ", annotations: {api-approved.kubernetes.io: \"https://github.com/kubernetes-sigs/gateway-api/pull/2466\"}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %s%s}
spec:
  group: %s
  scope: %s
  names: {kind: %s, listKind: %sList, plural: %s, singular: %s}
  versions:
`, k.CRD(), approved, k.Group, scope, k.Name, k.Name, k.Resource, strings.ToLower(k.Name))
	for i, v := range versions {
		fmt.Fprintf(&b, `  - name: %s
    served: true
    storage: %t
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, v, i == 0)
	}
	return b.String()
}

// WriteFile writes content in a file of t's temporary directory and
// returns its path.
func WriteFile(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crds.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
