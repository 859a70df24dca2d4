package secretstore_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rotationtest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

// secretCreates counts the API server's answers to creates of Secrets.
type secretCreates struct {
	created, conflicts atomic.Int32
}

func (s *secretCreates) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/secrets") {
			switch resp.StatusCode {
			case http.StatusCreated:
				s.created.Add(1)
			case http.StatusConflict:
				s.conflicts.Add(1)
			}
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newCA returns a self-signed CA keeping its root in ns's istio-ca-secret,
// through its own client.
func newCA(t *testing.T, env *testenv.Env, ns string, counts *secretCreates) *ca.CA {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = counts.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.New(ca.Config{
		TrustDomain: td,
		Store:       secretstore.New(client.CoreV1(), ns),
		Logger:      catest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCAsStartingTogetherShareOneRoot(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	// A few rounds, each on an empty namespace, so that the race where
	// both replicas find no Secret and both create one is exercised.
	const rounds = 3
	races := 0
	for round := range rounds {
		ns := env.Namespace(t)
		var counts secretCreates
		a, b := newCA(t, env, ns, &counts), newCA(t, env, ns, &counts)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for i, c := range []*ca.CA{a, b} {
			wg.Go(func() {
				<-start
				errs[i] = c.Load(t.Context())
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: CA %d: Load: %v", round, i, err)
			}
		}
		if n := counts.created.Load(); n != 1 {
			t.Fatalf("round %d: the API server created istio-ca-secret %d times; want once", round, n)
		}
		if counts.conflicts.Load() > 0 {
			races++
		}
		if !bytes.Equal(a.Current().PEM, b.Current().PEM) {
			t.Fatalf("round %d: the two CAs trust different roots", round)
		}
		crossVerify(t, a, b)
		crossVerify(t, b, a)

		list, err := env.Client(t).CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != secretstore.SecretName || list.Items[0].Type != secretstore.SecretType {
			t.Fatalf("round %d: namespace holds %d secrets; want only %s of type %s", round, len(list.Items), secretstore.SecretName, secretstore.SecretType)
		}
	}
	t.Logf("%d of %d rounds had both CAs create the Secret; the loser took the winner's root each time", races, rounds)
}

func TestACARestartedOnTheSecretKeepsTheRoot(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	var counts secretCreates
	first := newCA(t, env, ns, &counts)
	if err := first.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarted := newCA(t, env, ns, &counts)
	if err := restarted.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !restarted.SigningCert().Equal(first.SigningCert()) {
		t.Error("the restarted CA signs with another root")
	}
	if n := counts.created.Load() + counts.conflicts.Load(); n != 1 {
		t.Errorf("%d creates of istio-ca-secret; want 1 (the restart only reads)", n)
	}
	crossVerify(t, first, restarted)
}

func TestASecretWrittenByIstioIsUsed(t *testing.T) {
	// Istio's istiod writes ca-cert.pem and ca-key.pem, and root-cert.pem
	// as a copy of ca-cert.pem for a self-signed root.
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root := catest.NewRoot(t)
	client := env.Client(t)
	_, err := client.CoreV1().Secrets(ns).Create(context.Background(), istioSecret(root), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var counts secretCreates
	c := newCA(t, env, ns, &counts)
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !c.SigningCert().Equal(root.Cert) {
		t.Error("the CA did not take over the root from Istio's Secret")
	}
}

// crossVerify signs a workload certificate with from and verifies it with
// the bundle of to.
func crossVerify(t *testing.T, from, to *ca.CA) {
	t.Helper()
	key := catest.NewKey(t)
	id := spiffeid.RequireFromPath(td, "/ns/default/sa/app")
	issued, err := from.Sign(ca.SignRequest{PublicKey: key.Public(), Identities: []spiffeid.ID{id}})
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	if _, err := issued.Leaf.Verify(x509VerifyOptions(to)); err != nil {
		t.Fatalf("a certificate of one CA does not verify with the other's bundle: %v", err)
	}
}

func x509VerifyOptions(c *ca.CA) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: c.Current().Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
}

// istioSecret is istio-ca-secret as Istio's istiod writes it for a
// self-signed root.
func istioSecret(root *catest.Cert) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretstore.SecretName},
		Type:       secretstore.SecretType,
		Data: map[string][]byte{
			"ca-cert.pem":    root.CertPEM,
			"ca-key.pem":     root.KeyPEM,
			"cert-chain.pem": {},
			"root-cert.pem":  root.CertPEM,
		},
	}
}

// The rotation Secret on the real API server: resourceVersion makes every
// save a compare-and-swap between replicas.
func TestRotationStoreOnTheAPIServer(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	rotationtest.StoreContract(t, secretstore.NewRotationStore(env.Client(t).CoreV1(), env.Namespace(t)))
}
