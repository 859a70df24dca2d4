package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// After a root rotation istiod signs with the key kept in
// istio-ca-rotation, which `istiod ca status` names. `istiod ca reset`
// (bootstrap.ResetCA) is refused while a replica runs, deletes nothing
// when run as istiod's own service account (which may not delete them),
// and, with istiod stopped and the operator's credentials, deletes both
// Secrets: the next istiod signs with a new root and a key that is none
// of the old ones. Deleting the two Secrets with kubectl, as NOTES says,
// does the same.
func TestCAResetStartsOverAfterARotation(t *testing.T) {
	t.Parallel()
	// A cluster of its own: istiods of other tests writing
	// istio-ca-root-cert in its namespaces would hold the rotation back.
	env, ns, _ := privateCluster(t)
	ctx := context.Background()
	client := env.Client(t)
	istiodKC := istiodKubeconfig(t, env, ns)
	operator := bootstrap.DefaultConfig()
	operator.Kubeconfig, operator.Namespace = env.Kubeconfig, ns
	asIstiod := operator
	asIstiod.Kubeconfig = istiodKC
	discard := slog.New(slog.DiscardHandler)
	status := func() *ca.SigningKey { // as `istiod ca status` reads it
		t.Helper()
		authority, err := bootstrap.NewCA(operator, discard)
		if err != nil {
			t.Fatal(err)
		}
		k, err := authority.SigningKey(ctx)
		if err != nil {
			t.Fatalf("signing key: %v", err)
		}
		return k
	}
	start := func(name string) *istiod {
		t.Helper()
		p := newIstiodIn(t, env, name, ns, istiodKC, func(c *bootstrap.Config) {
			c.RootRotationTick, c.RootRotationGrace = 100*time.Millisecond, time.Millisecond
		})
		p.run(t)
		waitFor(t, name+" ready", 60*time.Second, p.ready)
		return p
	}
	// rotate has p rotate the root and waits until the new key signs.
	rotate := func(p *istiod) (from, to string) {
		t.Helper()
		before := status()
		if before.Where != "Secret "+ns+"/"+secretstore.SecretName {
			t.Errorf("before the rotation, ca status says the key is in %q", before.Where)
		}
		authority, err := bootstrap.NewCA(operator, discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := authority.Rotator().Request(ctx); err != nil { // `istiod ca rotate`
			t.Fatalf("request rotation: %v", err)
		}
		from = ski(before.Cert)
		waitFor(t, p.name+" signing with the new key", 60*time.Second, func() bool { return servingIssuer(t, p) != from })
		after := status()
		if want := "Secret " + ns + "/" + secretstore.RotationSecretName + ", the new set"; after.Where != want {
			t.Errorf("after activation, ca status says the key is in %q, want %q", after.Where, want)
		}
		to = ski(after.Cert)
		if got := servingIssuer(t, p); got != to || to == from {
			t.Fatalf("after activation %s signs with key %s; ca status says %s (before the rotation %s)", p.name, got, to, from)
		}
		return from, to
	}
	// startsOver starts an istiod and checks that a workload gets a
	// certificate of a new root, whose key is none of old.
	app := env.Namespace(t)
	token := env.ServiceAccountToken(t, app, "app", []string{"istio-ca"}, nil)
	startsOver := func(name string, old ...string) (*istiod, string) {
		t.Helper()
		if k := status(); k.Cert != nil {
			t.Fatalf("before %s starts, ca status finds a key in %s", name, k.Where)
		}
		p := start(name)
		k := status()
		fresh := ski(k.Cert)
		if slices.Contains(old, fresh) || k.Where != "Secret "+ns+"/"+secretstore.SecretName || k.Phase != ca.PhaseIdle {
			t.Fatalf("after starting over %s signs with key %s in %s, phase %q (old keys %v)", name, fresh, k.Where, k.Phase, old)
		}
		roots := x509.NewCertPool()
		roots.AddCert(k.Root)
		var bundle string
		waitFor(t, "istio-ca-root-cert to hold the new root alone", 30*time.Second, func() bool {
			cm, err := client.CoreV1().ConfigMaps(app).Get(ctx, rootcert.ConfigMapName, metav1.GetOptions{})
			bundle = ""
			if err == nil {
				bundle = cm.Data[rootcert.DataKey]
			}
			block, rest := pem.Decode([]byte(bundle))
			return block != nil && len(rest) == 0 && string(block.Bytes) == string(k.Root.Raw)
		})
		chain := p.sign(t, roots, app, "app", token)
		leaf := parsePEM(t, chain[0])
		if got := hex.EncodeToString(leaf.AuthorityKeyId); got != fresh {
			t.Errorf("%s signed a workload with key %s; ca status says %s", name, got, fresh)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the workload certificate does not verify with the new root: %v", err)
		}
		if chain[len(chain)-1] != bundle {
			t.Errorf("the bundle in the CSR response is not istio-ca-root-cert's:\n%s", chain[len(chain)-1])
		}
		return p, fresh
	}
	// The Secrets' UIDs: a running istiod may update istio-ca-rotation
	// (its reports, its phase); only a deletion changes a UID.
	versions := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, name := range secretstore.ResetSecrets {
			s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("secret %s: %v", name, err)
			}
			out[name] = string(s.UID)
		}
		return out
	}

	a := start("istiod-a")
	original, rotated := rotate(a)
	kept := versions()
	if _, err := bootstrap.ResetCA(ctx, operator, discard); !errors.Is(err, ca.ErrIstiodRunning) {
		t.Fatalf("reset while istiod runs: %v, want %v", err, ca.ErrIstiodRunning)
	}
	a.stop()
	if _, err := bootstrap.ResetCA(ctx, asIstiod, discard); !apierrors.IsForbidden(err) {
		t.Errorf("reset as istiod's service account: %v, want forbidden", err)
	}
	if got := versions(); got[secretstore.SecretName] != kept[secretstore.SecretName] || got[secretstore.RotationSecretName] != kept[secretstore.RotationSecretName] {
		t.Fatalf("a refused reset deleted Secrets: UIDs %v, then %v", kept, got)
	}
	deleted, err := bootstrap.ResetCA(ctx, operator, discard)
	if want := []string{ns + "/" + secretstore.RotationSecretName, ns + "/" + secretstore.SecretName}; err != nil || !slices.Equal(deleted, want) {
		t.Fatalf("reset: deleted %v, %v; want %v", deleted, err, want)
	}
	b, fresh := startsOver("istiod-b", original, rotated)

	// The same with kubectl: kubectl -n <ns> delete secret istio-ca-rotation istio-ca-secret
	_, again := rotate(b)
	b.stop()
	for _, name := range secretstore.ResetSecrets {
		if err := client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete secret %s: %v", name, err)
		}
	}
	startsOver("istiod-c", original, rotated, fresh, again)
}

// servingIssuer is the subject key id of the key that signed the
// certificate p serves on its secure gRPC port: the key that signs
// re-issues istiod's own certificate when it begins to sign.
func servingIssuer(t *testing.T, p *istiod) string {
	t.Helper()
	conn, err := tls.Dial("tcp", p.cfg.SecureGRPCAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // only the issuer is read
	if err != nil {
		t.Fatalf("dial %s: %v", p.name, err)
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		t.Fatalf("%s served no certificate", p.name)
	}
	return hex.EncodeToString(certs[0].AuthorityKeyId)
}

func ski(c *x509.Certificate) string { return hex.EncodeToString(c.SubjectKeyId) }

func parsePEM(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
