package meshconfig

import (
	"testing"
)

// FuzzParse feeds Parse arbitrary documents: it never panics, and what it
// accepts passes Validate and stays within the bounds.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"trustDomain: new.td\ntrustDomainAliases: [old.td]\n",
		"outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nenableAutoMtls: false\nrootNamespace: mesh-root\n",
		"defaultConfig: {discoveryAddress: istiod.istio-system.svc:15012, proxyMetadata: {A: b}}\n",
		"outboundTrafficPolicy: {mode: NOPE}\n",
		"unknownField: {nested: [1, 2, {x: y}]}\n",
		"trustDomain: [not, a, string]\n",
		"&a [*a, *a]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mc, _, err := Parse(data, testDefaults)
		if err != nil {
			return
		}
		if len(data) > MaxBytes {
			t.Fatalf("a document of %d bytes was accepted", len(data))
		}
		if err := Validate(mc); err != nil {
			t.Fatalf("accepted a configuration Validate refuses: %v", err)
		}
		if n := len(mc.GetTrustDomainAliases()); n > MaxTrustDomainAliases {
			t.Fatalf("accepted %d aliases", n)
		}
	})
}
