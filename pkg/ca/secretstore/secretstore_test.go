package secretstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

const testNS = "istio-system"

func material(tag string) *ca.KeyMaterial {
	return &ca.KeyMaterial{
		CACert:    []byte("cert " + tag),
		CAKey:     []byte("key " + tag),
		CertChain: nil,
		RootCert:  []byte("root " + tag),
	}
}

func TestLoadOfAMissingSecretIsNotFound(t *testing.T) {
	s := New(fake.NewClientset().CoreV1(), testNS)
	_, err := s.Load(context.Background())
	if !errors.Is(err, ca.ErrNotFound) {
		t.Fatalf("Load = %v; want ca.ErrNotFound", err)
	}
}

func TestCreateWritesIstiosSecretLayout(t *testing.T) {
	client := fake.NewClientset()
	s := New(client.CoreV1(), testNS)
	m := material("a")
	got, err := s.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CACert, m.CACert) {
		t.Error("Create did not return the material it stored")
	}
	secret, err := client.CoreV1().Secrets(testNS).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != SecretType {
		t.Errorf("type %q; want %q", secret.Type, SecretType)
	}
	want := map[string]string{
		"ca-cert.pem": "cert a", "ca-key.pem": "key a", "cert-chain.pem": "", "root-cert.pem": "root a",
	}
	if len(secret.Data) != len(want) {
		t.Errorf("data keys %v; want %v", keys(secret.Data), want)
	}
	for k, v := range want {
		got, ok := secret.Data[k]
		if !ok || string(got) != v {
			t.Errorf("data[%s] = %q (present %t); want %q", k, got, ok, v)
		}
	}
	loaded, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.CACert, m.CACert) || !bytes.Equal(loaded.CAKey, m.CAKey) ||
		!bytes.Equal(loaded.RootCert, m.RootCert) || len(loaded.CertChain) != 0 {
		t.Errorf("Load = %+v; want what Create stored", loaded)
	}
}

func TestCreateOverAnExistingSecretReturnsTheExistingSet(t *testing.T) {
	client := fake.NewClientset()
	s := New(client.CoreV1(), testNS)
	if _, err := s.Create(context.Background(), material("first")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Create(context.Background(), material("second"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.CACert) != "cert first" {
		t.Errorf("Create returned %q; want the first set", got.CACert)
	}
	stored, _ := client.CoreV1().Secrets(testNS).Get(context.Background(), SecretName, metav1.GetOptions{})
	if string(stored.Data["ca-cert.pem"]) != "cert first" {
		t.Error("the second Create overwrote the Secret")
	}
}

func TestCreateThatLosesARaceReturnsTheWinner(t *testing.T) {
	// The API server answers AlreadyExists: another replica created the
	// Secret between this replica's Load and Create.
	winner, err := ToSecret(material("winner"))
	if err != nil {
		t.Fatal(err)
	}
	winner.Namespace = testNS
	client := fake.NewClientset(winner)
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, SecretName)
	})
	got, err := New(client.CoreV1(), testNS).Create(context.Background(), material("loser"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.CACert) != "cert winner" {
		t.Errorf("Create returned %q; want the winner's set", got.CACert)
	}
}

func TestStoreErrorsNameWhatFailed(t *testing.T) {
	boom := errors.New("etcdserver: request timed out")
	failing := func(verb string) *fake.Clientset {
		c := fake.NewClientset()
		c.PrependReactor(verb, "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, boom
		})
		return c
	}
	lostRace := func() *fake.Clientset {
		c := failing("get")
		c.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, SecretName)
		})
		return c
	}
	load := func(s *Store) error { _, err := s.Load(context.Background()); return err }
	create := func(s *Store) error { _, err := s.Create(context.Background(), material("a")); return err }
	for name, tc := range map[string]struct {
		client  *fake.Clientset
		run     func(*Store) error
		wantMsg string
	}{
		"a failed get is returned, not taken for an empty store": {
			client: failing("get"), run: load, wantMsg: "load secret istio-system/istio-ca-secret",
		},
		"a failed create is returned": {
			client: failing("create"), run: create, wantMsg: "create secret istio-system/istio-ca-secret",
		},
		"a lost race whose winner cannot be read is an error": {
			client: lostRace(), run: create, wantMsg: "another writer created it first",
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.run(New(tc.client.CoreV1(), testNS))
			if !errors.Is(err, boom) || errors.Is(err, ca.ErrNotFound) {
				t.Fatalf("error = %v; want one wrapping %v", err, boom)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not say %q", err, tc.wantMsg)
			}
		})
	}
}

func TestFromSecretChecksTheShape(t *testing.T) {
	full := func() map[string][]byte {
		return map[string][]byte{
			"ca-cert.pem": []byte("cert"), "ca-key.pem": []byte("key"),
			"cert-chain.pem": []byte("chain"), "root-cert.pem": []byte("root"),
		}
	}
	without := func(key string) map[string][]byte { d := full(); delete(d, key); return d }
	emptied := func(key string) map[string][]byte { d := full(); d[key] = []byte(" \n"); return d }
	for name, tc := range map[string]struct {
		data      map[string][]byte
		wantErr   string // empty: no error
		wantRoots string
		wantChain string
	}{
		"a full set is read as is":                     {data: full(), wantRoots: "root", wantChain: "chain"},
		"a missing ca-cert.pem is named":               {data: without("ca-cert.pem"), wantErr: "key ca-cert.pem is missing"},
		"a missing ca-key.pem is named":                {data: without("ca-key.pem"), wantErr: "key ca-key.pem is missing"},
		"an empty ca-key.pem is named":                 {data: emptied("ca-key.pem"), wantErr: "key ca-key.pem is empty"},
		"a missing root-cert.pem means cert is a root": {data: without("root-cert.pem"), wantRoots: "cert", wantChain: "chain"},
		"an empty root-cert.pem means cert is a root":  {data: emptied("root-cert.pem"), wantRoots: "cert", wantChain: "chain"},
		"a missing cert-chain.pem is an empty chain":   {data: without("cert-chain.pem"), wantRoots: "root"},
		"a secret without data names the first key":    {data: nil, wantErr: "key ca-cert.pem is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := FromSecret(&corev1.Secret{Data: tc.data})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v; want ErrInvalidSecret saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(m.RootCert) != tc.wantRoots || string(m.CertChain) != tc.wantChain {
				t.Errorf("roots %q chain %q; want %q and %q", m.RootCert, m.CertChain, tc.wantRoots, tc.wantChain)
			}
		})
	}
}

func TestLoadOfAMalformedSecretIsNotNotFound(t *testing.T) {
	// A broken Secret must not be taken for an empty store: the CA would
	// then try to create a new root and fail, or worse, succeed elsewhere.
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: testNS},
		Data:       map[string][]byte{"ca-cert.pem": []byte("cert")},
	})
	_, err := New(client.CoreV1(), testNS).Load(context.Background())
	if !errors.Is(err, ErrInvalidSecret) || errors.Is(err, ca.ErrNotFound) {
		t.Fatalf("Load = %v; want ErrInvalidSecret", err)
	}
	if !strings.Contains(err.Error(), "ca-key.pem") {
		t.Errorf("error %q does not name ca-key.pem", err)
	}
}

func TestToSecretRefusesIncompleteMaterial(t *testing.T) {
	for name, tc := range map[string]struct {
		m    *ca.KeyMaterial
		want string
	}{
		"no material":   {m: nil, want: "no key material"},
		"no key":        {m: &ca.KeyMaterial{CACert: []byte("c"), RootCert: []byte("r")}, want: "ca-key.pem is empty"},
		"no roots":      {m: &ca.KeyMaterial{CACert: []byte("c"), CAKey: []byte("k")}, want: "root-cert.pem is empty"},
		"no signing CA": {m: &ca.KeyMaterial{CAKey: []byte("k"), RootCert: []byte("r")}, want: "ca-cert.pem is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			_, err := New(client.CoreV1(), testNS).Create(context.Background(), tc.m)
			if !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v; want ErrInvalidSecret saying %q", err, tc.want)
			}
			if len(client.Actions()) != 0 {
				t.Errorf("Create sent %d requests for invalid material; want none", len(client.Actions()))
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
