package ca

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// BenchmarkSign measures the whole in-process path for one workload
// certificate: parse and check the CSR, sign, verify the chain, encode PEM.
// The workload key is P-256; the sub-benchmarks vary the CA key.
func BenchmarkSign(b *testing.B) {
	id := testID("foo", "app")
	csrPEM := catest.CSR(b, catest.NewKey(b), id.String())
	allowed := []spiffeid.ID{id}
	for _, kt := range []KeyType{KeyTypeECDSAP256, KeyTypeRSA2048} {
		b.Run(string(kt), func(b *testing.B) {
			c := newTestCA(b, func(cfg *Config) {
				cfg.KeyType = kt
				cfg.Logger = nil // keep the benchmark output clean
			})
			mustLoad(b, c)
			for b.Loop() {
				csr, err := ParseCSR(csrPEM)
				if err != nil {
					b.Fatal(err)
				}
				if err := CheckCSR(csr, allowed); err != nil {
					b.Fatal(err)
				}
				iss, err := c.Sign(SignRequest{PublicKey: csr.PublicKey, Identities: allowed})
				if err != nil {
					b.Fatal(err)
				}
				if len(iss.Chain) < 2 {
					b.Fatal("short chain")
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
		})
	}
}
