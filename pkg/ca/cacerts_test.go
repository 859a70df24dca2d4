package ca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

func TestLoadPluggedInAcceptsBothLayouts(t *testing.T) {
	root := catest.NewRoot(t)
	inter := catest.NewIntermediate(t, root)
	signing := catest.NewIntermediate(t, inter)
	set := catest.CACerts{Signing: signing, Intermediates: []*catest.Cert{inter}, Roots: []*catest.Cert{root}}
	rsaCA := catest.NewIntermediate(t, root, catest.WithKey(rsa2048()))
	ecKey := catest.NewECDSAKey(t, elliptic.P384())
	ecCA := catest.NewIntermediate(t, root, catest.WithKey(ecKey))

	tests := map[string]struct {
		files     map[string][]byte
		wantChain int // issuing chain elements: signing cert and intermediates
	}{
		"Istio's layout with cert-chain.pem from signing cert to root": {files: set.Files(), wantChain: 2},
		"Istio's layout with only the intermediates in cert-chain.pem": {
			files: with(set.Files(), FileCertChain, inter.CertPEM), wantChain: 2},
		"Istio's layout with an empty cert-chain.pem under a root": {
			files: with(catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}.Files(), FileCertChain, nil), wantChain: 1},
		"the TLS layout with the chain in tls.crt": {files: set.TLSFiles(), wantChain: 2},
		"a PKCS#1 RSA key": {
			files: with(catest.CACerts{Signing: rsaCA, Roots: []*catest.Cert{root}}.Files(), FileCAKey,
				pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsa2048().(*rsa.PrivateKey))})),
			wantChain: 1},
		"a SEC 1 EC key after an EC PARAMETERS block": {
			files:     with(catest.CACerts{Signing: ecCA, Roots: []*catest.Cert{root}}.Files(), FileCAKey, sec1(t, ecKey.(*ecdsa.PrivateKey))),
			wantChain: 1},
		"an intermediate whose extended key usages are serverAuth and clientAuth": {
			files: func() map[string][]byte {
				inter := catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
				return catest.CACerts{Signing: catest.NewIntermediate(t, inter), Intermediates: []*catest.Cert{inter}, Roots: []*catest.Cert{root}}.Files()
			}(),
			wantChain: 2},
		"a signing certificate whose extended key usages include serverAuth and clientAuth": {
			files: catest.CACerts{Signing: catest.NewIntermediate(t, root, catest.WithExtKeyUsage(
				x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageCodeSigning, x509.ExtKeyUsageServerAuth)), Roots: []*catest.Cert{root}}.Files(),
			wantChain: 1},
		"text around the PEM blocks, as openssl writes it": {
			files:     with(set.Files(), FileCACert, append(append([]byte("subject=CN = Test\n"), signing.CertPEM...), "trailing words\n"...)),
			wantChain: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			catest.WriteFiles(t, dir, tc.files)
			a, found, err := loadPluggedIn(dir, time.Now())
			if err != nil || !found {
				t.Fatalf("loadPluggedIn = found %t, %v; want a set", found, err)
			}
			if len(a.chainPEM) != tc.wantChain {
				t.Errorf("issuing chain has %d certificates; want %d", len(a.chainPEM), tc.wantChain)
			}
			if len(a.roots) != 1 || !a.roots[0].Equal(root.Cert) {
				t.Errorf("roots are not the test root")
			}
		})
	}
}

func TestLoadPluggedInFindsNothing(t *testing.T) {
	tests := map[string]func(t *testing.T) string{
		"a directory that does not exist": func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing") },
		"an empty directory":              func(t *testing.T) string { return t.TempDir() },
		"a directory of unrelated files": func(t *testing.T) string {
			dir := t.TempDir()
			catest.WriteFiles(t, dir, map[string][]byte{"README": []byte("hi")})
			return dir
		},
	}
	for name, dir := range tests {
		t.Run(name, func(t *testing.T) {
			_, found, err := loadPluggedIn(dir(t), time.Now())
			if found || err != nil {
				t.Errorf("loadPluggedIn = found %t, %v; want nothing", found, err)
			}
		})
	}
}

func TestLoadPluggedInNamesTheBadFile(t *testing.T) {
	root := catest.NewRoot(t)
	good := catest.CACerts{Signing: catest.NewIntermediate(t, root), Roots: []*catest.Cert{root}}
	setFor := func(c *catest.Cert) map[string][]byte {
		return catest.CACerts{Signing: c, Roots: []*catest.Cert{root}}.Files()
	}
	past := time.Now().Add(-48 * time.Hour)
	expiredRoot := catest.NewRoot(t, catest.WithValidity(past, past.Add(time.Hour)))

	tests := map[string]struct {
		files map[string][]byte
		setup func(dir string)
		want  string // prefix of the error text
	}{
		"a key that does not match the certificate": {
			files: with(good.Files(), FileCAKey, catest.KeyPEM(t, catest.NewKey(t))),
			want:  "cacerts: ca-key.pem: private key does not match ca-cert.pem"},
		"a TLS key that does not match the certificate": {
			files: with(good.TLSFiles(), FileTLSKey, catest.KeyPEM(t, catest.NewKey(t))),
			want:  "cacerts: tls.key: private key does not match tls.crt"},
		"a certificate that is not a CA": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithoutCA())),
			want:  "cacerts: ca-cert.pem: certificate is not a CA"},
		"a CA without the certSign usage": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithKeyUsage(x509.KeyUsageDigitalSignature))),
			want:  "cacerts: ca-cert.pem: certificate lacks the keyCertSign key usage"},
		"a chain that does not verify to the root": {
			files: with(good.Files(), FileRootCert, catest.NewRoot(t).CertPEM),
			want:  "cacerts: ca-cert.pem: does not verify to root-cert.pem"},
		"an expired signing certificate": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithValidity(past, past.Add(time.Hour)))),
			want:  "cacerts: ca-cert.pem: certificate expired"},
		"a signing certificate that is not valid yet": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithValidity(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)))),
			want:  "cacerts: ca-cert.pem: certificate is not valid before"},
		"an expired root": {
			files: catest.CACerts{Signing: catest.NewIntermediate(t, expiredRoot), Roots: []*catest.Cert{expiredRoot}}.Files(),
			want:  "cacerts: ca-cert.pem: does not verify to root-cert.pem"},
		"a partial set without the key": {
			files: without(good.Files(), FileCAKey),
			want:  "cacerts: ca-key.pem: missing from a partial set"},
		"a partial TLS set": {
			files: without(good.TLSFiles(), FileTLSKey, FileTLSCA),
			want:  "cacerts: tls.key: missing from a partial set"},
		"an oversized certificate file": {
			files: with(good.Files(), FileCACert, bytes.Repeat([]byte("A"), maxFileSize+1)),
			want:  "cacerts: ca-cert.pem: file larger than"},
		"a garbage certificate": {
			files: with(good.Files(), FileCACert, []byte("garbage")),
			want:  "cacerts: ca-cert.pem: no PEM certificate found"},
		"a garbage key": {
			files: with(good.Files(), FileCAKey, []byte("garbage")),
			want:  "cacerts: ca-key.pem: no PEM private key found"},
		"a corrupt key": {
			files: with(good.Files(), FileCAKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")})),
			want:  "cacerts: ca-key.pem: parse private key"},
		"a certificate where the key should be": {
			files: with(good.Files(), FileCAKey, root.CertPEM),
			want:  "cacerts: ca-key.pem: unexpected PEM block \"CERTIFICATE\""},
		"two keys": {
			files: with(good.Files(), FileCAKey, append(append([]byte{}, good.Signing.KeyPEM...), good.Signing.KeyPEM...)),
			want:  "cacerts: ca-key.pem: more than one PEM block holds a key"},
		"an encrypted key": {
			files: with(good.Files(), FileCAKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
				Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte("x")})),
			want: "cacerts: ca-key.pem: encrypted private keys are not supported"},
		"garbage roots": {
			files: with(good.Files(), FileRootCert, []byte("garbage")),
			want:  "cacerts: root-cert.pem: no PEM certificate found"},
		"a corrupt certificate in the chain": {
			files: with(good.Files(), FileCertChain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})),
			want:  "cacerts: cert-chain.pem: parse certificate 1"},
		"an RSA-1024 CA key": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithKey(catest.NewRSAKey(t, 1024)))),
			want:  "cacerts: ca-key.pem: rsa key of 1024 bits"},
		"a P-521 CA key": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithKey(catest.NewECDSAKey(t, elliptic.P521())))),
			want:  "cacerts: ca-key.pem: ecdsa curve P-521"},
		"a signing certificate whose extended key usage is codeSigning": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageCodeSigning))),
			want:  `cacerts: ca-cert.pem: certificate "CN=Test Intermediate,O=bulwark test" limits extended key usage to codeSigning, without serverAuth`},
		"an intermediate in the chain whose extended key usage is codeSigning": {
			files: func() map[string][]byte {
				inter := catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageCodeSigning))
				return catest.CACerts{Signing: catest.NewIntermediate(t, inter), Intermediates: []*catest.Cert{inter}, Roots: []*catest.Cert{root}}.Files()
			}(),
			want: `cacerts: cert-chain.pem: certificate "CN=Test Intermediate,O=bulwark test" limits extended key usage to codeSigning, without serverAuth`},
		"an intermediate in tls.crt for servers only": {
			files: func() map[string][]byte {
				inter := catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageServerAuth))
				return catest.CACerts{Signing: catest.NewIntermediate(t, inter), Intermediates: []*catest.Cert{inter}, Roots: []*catest.Cert{root}}.TLSFiles()
			}(),
			want: `cacerts: tls.crt: certificate "CN=Test Intermediate,O=bulwark test" limits extended key usage to serverAuth, without clientAuth`},
		"a signing certificate whose extended key usage is anyExtendedKeyUsage only": {
			files: setFor(catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageAny))),
			want:  `cacerts: ca-cert.pem: certificate "CN=Test Intermediate,O=bulwark test" limits extended key usage to anyExtendedKeyUsage, without serverAuth`},
		"a root whose extended key usage is codeSigning": {
			files: func() map[string][]byte {
				r := catest.NewRoot(t, catest.WithExtKeyUsage(x509.ExtKeyUsageCodeSigning))
				return catest.CACerts{Signing: catest.NewIntermediate(t, r), Roots: []*catest.Cert{r}}.Files()
			}(),
			want: `cacerts: root-cert.pem: certificate "CN=Test Root,O=bulwark test" limits extended key usage to codeSigning, without serverAuth`},
		"a directory where a file should be": {
			files: without(good.Files(), FileCACert),
			setup: func(dir string) { os.Mkdir(filepath.Join(dir, FileCACert), 0o700) },
			want:  "cacerts: ca-cert.pem: not a regular file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			catest.WriteFiles(t, dir, tc.files)
			if tc.setup != nil {
				tc.setup(dir)
			}
			_, _, err := loadPluggedIn(dir, time.Now())
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one starting %q", err, tc.want)
			}
			var fe *FileError
			if !errors.As(err, &fe) || !strings.HasPrefix(tc.want, "cacerts: "+fe.File+":") {
				t.Errorf("error %v does not carry the file as a *FileError", err)
			}
			c := newTestCA(t, func(cfg *Config) { cfg.CACertsDir = dir })
			if err := c.Load(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) || c.Ready() {
				t.Errorf("Load = %v, ready %t; want it to fail with %q", err, c.Ready(), tc.want)
			}
		})
	}
}

func with(files map[string][]byte, name string, data []byte) map[string][]byte {
	files[name] = data
	return files
}

func without(files map[string][]byte, names ...string) map[string][]byte {
	for _, n := range names {
		delete(files, n)
	}
	return files
}

// sec1 encodes key as openssl ecparam -genkey does: parameters, then key.
func sec1(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22}})
	return append(params, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...)
}

// A leaf is verified for each usage it carries: below an intermediate
// limited to codeSigning it does not verify, as Envoy would not verify it.
func TestVerifyToRootsAsksForTheLeafUsages(t *testing.T) {
	set, root := pluggedIn(t)
	dir := t.TempDir()
	catest.WriteCACerts(t, dir, set)
	a, _, err := loadPluggedIn(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, usages := range map[string][]x509.ExtKeyUsage{
		"codeSigning":            {x509.ExtKeyUsageCodeSigning},
		"serverAuth only":        {x509.ExtKeyUsageServerAuth},
		"serverAuth, clientAuth": {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	} {
		t.Run(name, func(t *testing.T) {
			inter := catest.NewIntermediate(t, root, catest.WithExtKeyUsage(usages...))
			b := *a
			b.interPool = x509.NewCertPool()
			b.interPool.AddCert(inter.Cert)
			now := time.Now()
			tmpl := leafTemplate(&b, newSerial(), now, now.Add(time.Hour), nil, testID("ns", "sa").URL())
			der, err := x509.CreateCertificate(rand.Reader, tmpl, inter.Cert, catest.NewKey(t).Public(), inter.Key)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			err = b.verifyToRoots(leaf, now)
			if allowed := len(usages) == 2; allowed != (err == nil) {
				t.Fatalf("verify below an intermediate for %s: %v", name, err)
			}
		})
	}
}
