package sds

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzParseName checks that a resource name a proxy sends never resolves
// to another namespace than the one it names, or the proxy's own.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"kubernetes://a", "kubernetes://ns/a", "kubernetes://ns/a-cacert", "kubernetes:///a", "kubernetes://a/b/c", "ROOTCA", "-cacert"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ref, ok := parseName(name, "proxy")
		if !ok {
			return
		}
		rest := strings.TrimPrefix(name, KubernetesPrefix)
		if ref.namespace != "proxy" && !strings.HasPrefix(rest, ref.namespace+"/") {
			t.Fatalf("%q resolved to namespace %q", name, ref.namespace)
		}
		if ref.name == "" || strings.Contains(ref.name, "/") {
			t.Fatalf("%q resolved to secret %q", name, ref.name)
		}
	})
}

// FuzzCertificate checks that secret material that does not parse is
// never served.
func FuzzCertificate(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), []byte("key"))
	f.Fuzz(func(t *testing.T, cert, key []byte) {
		s := &corev1.Secret{Data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": cert}}
		if sec, err := certificate("kubernetes://x", s, DefaultMaxSecretSize); err == nil {
			if _, err := parseCerts(sec.GetTlsCertificate().GetCertificateChain().GetInlineBytes()); err != nil {
				t.Fatalf("served a chain that does not parse: %v", err)
			}
		}
		_, _ = validation("kubernetes://x-cacert", s, DefaultMaxSecretSize)
	})
}
