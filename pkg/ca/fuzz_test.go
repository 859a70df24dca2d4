package ca

import (
	"errors"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// FuzzParseCSR feeds arbitrary bytes to the CSR policy. Seeds live in
// testdata/fuzz/FuzzParseCSR.
func FuzzParseCSR(f *testing.F) {
	f.Add(catest.CSR(f, catest.NewKey(f), fooURI))
	allowed := []spiffeid.ID{spiffeid.RequireFromString(fooURI)}
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		if err != nil {
			if csr != nil {
				t.Fatal("ParseCSR returned a request and an error")
			}
			return
		}
		_ = CheckCSR(csr, allowed)
	})
}

// fuzzNow is the fixed time FuzzLoadCACerts checks validity at, so seeds
// stay meaningful.
var fuzzNow = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// FuzzLoadCACerts loads arbitrary bytes as the contents of the four files
// of Istio's layout, through the checks a plugged-in directory goes through
// once read. (Reading is left out to keep the fuzzer fast; it only bounds
// sizes.) Seeds live in testdata/fuzz/FuzzLoadCACerts.
func FuzzLoadCACerts(f *testing.F) {
	root := catest.NewRoot(f, catest.WithValidity(fuzzNow.AddDate(-1, 0, 0), fuzzNow.AddDate(10, 0, 0)))
	inter := catest.NewIntermediate(f, root, catest.WithValidity(fuzzNow.AddDate(-1, 0, 0), fuzzNow.AddDate(5, 0, 0)))
	files := catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}.Files()
	f.Add(files[FileCACert], files[FileCAKey], files[FileCertChain], files[FileRootCert])
	f.Fuzz(func(t *testing.T, cert, key, chain, roots []byte) {
		set := rawSet{files: istioFiles, cert: cert, key: key, chain: chain, roots: roots}
		a, err := newAuthority(set, fuzzNow, sourcePluggedIn)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v does not name a file", err)
			}
			return
		}
		if a.signer == nil || len(a.roots) == 0 || len(a.rootsPEM) == 0 {
			t.Fatal("loaded an incomplete authority")
		}
	})
}
