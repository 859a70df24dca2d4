package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// mintCert issues a client certificate for one workload identity straight
// from the local CA and writes it as Istio's agent writes its own:
// cert-chain.pem, key.pem and root-cert.pem. It is how a first caller gets a
// credential when there is no Kubernetes and no OIDC issuer.
func mintCert(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("mint-cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addCommonFlags(fs, &cfg, getenv)
	ns := fs.String("namespace", "default", "namespace of the identity")
	sa := fs.String("service-account", "", "service account of the identity (required)")
	outDir := fs.String("out-dir", "", "directory the files are written to, created 0700 (required)")
	ttl := fs.Duration("ttl", 24*time.Hour, "certificate lifetime")
	keyType := fs.String("key-type", string(ca.KeyTypeECDSAP256), "key of the issued certificate")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if *sa == "" || *outDir == "" {
		return usageError{errors.New("--service-account and --out-dir are required")}
	}
	// The CA's trust domain is the mesh config's, as for discovery.
	if err := loadMeshConfig(&cfg, trustDomainSet(fs, getenv), stderr); err != nil {
		return err
	}
	td, err := spiffeid.TrustDomainFromString(cfg.TrustDomain)
	if err != nil {
		return usageError{fmt.Errorf("--trust-domain: %w", err)}
	}
	id, err := spiffeid.FromSegments(td, "ns", *ns, "sa", *sa)
	if err != nil {
		return usageError{fmt.Errorf("identity: %w", err)}
	}
	kt, err := ca.ParseKeyType(*keyType)
	if err != nil {
		return usageError{fmt.Errorf("--key-type: %w", err)}
	}

	log, err := newLogger("text", "warn", stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	authority, err := bootstrap.NewCA(cfg, log)
	if err != nil {
		return err
	}
	if err := authority.Load(ctx); err != nil {
		return fmt.Errorf("load ca: %w", err)
	}
	key, err := ca.GenerateKey(kt)
	if err != nil {
		return err
	}
	issued, err := authority.Sign(ca.SignRequest{PublicKey: key.Public(), Identities: []spiffeid.ID{id}, TTL: *ttl})
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	// A root rotation keeps the signing root trusted until this expires.
	if err := authority.Rotator().RecordIssued(ctx); err != nil {
		return fmt.Errorf("record the certificate's expiry for root rotation: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key: %w", err)
	}
	last := len(issued.Chain) - 1
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{"cert-chain.pem", []byte(strings.Join(issued.Chain[:last], "")), 0o644},
		{"root-cert.pem", []byte(issued.Chain[last]), 0o644},
	}
	if err := os.MkdirAll(*outDir, 0o700); err != nil {
		return fmt.Errorf("out dir: %w", err)
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(*outDir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "issued %s (serial %s, expires %s) into %s\n", id, issued.Leaf.SerialNumber.Text(16),
		issued.Leaf.NotAfter.UTC().Format(time.RFC3339), *outDir)
	return nil
}

// writeFileAtomic writes through a temp file, fsync and rename, so a reader
// never sees half a key.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
