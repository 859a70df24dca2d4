package authn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// stubAuthenticator returns a fixed result and records that it ran.
type stubAuthenticator struct {
	kind   string
	caller *Caller
	err    error
	ran    *[]string
}

func (s stubAuthenticator) Kind() string { return s.kind }

func (s stubAuthenticator) Authenticate(context.Context) (*Caller, error) {
	*s.ran = append(*s.ran, s.kind)
	return s.caller, s.err
}

func TestChain(t *testing.T) {
	errBadCert := errors.New("bad certificate")
	errBadToken := errors.New("bad token")
	caller := func(kind string) *Caller {
		return &Caller{Identities: []spiffeid.ID{spiffeid.RequireFromString(workloadID)}, Authenticator: kind}
	}
	type step struct {
		kind string
		ok   bool
		err  error
	}
	tests := map[string]struct {
		steps    []step
		wantKind string
		wantErrs []error
		wantRan  []string
	}{
		"the first success wins and later authenticators do not run": {
			steps:    []step{{kind: "a", ok: true}, {kind: "b", ok: true}},
			wantKind: "a",
			wantRan:  []string{"a"},
		},
		"authenticators without credentials are skipped": {
			steps:    []step{{kind: "a", err: ErrNoCredentials}, {kind: "b", ok: true}},
			wantKind: "b",
			wantRan:  []string{"a", "b"},
		},
		"a failure does not stop the chain": {
			steps:    []step{{kind: "a", err: errBadCert}, {kind: "b", ok: true}},
			wantKind: "b",
			wantRan:  []string{"a", "b"},
		},
		"when no authenticator finds credentials the chain has none": {
			steps:    []step{{kind: "a", err: ErrNoCredentials}, {kind: "b", err: ErrNoCredentials}},
			wantErrs: []error{ErrNoCredentials},
			wantRan:  []string{"a", "b"},
		},
		"when all fail every failure is kept": {
			steps:    []step{{kind: "a", err: errBadCert}, {kind: "b", err: ErrNoCredentials}, {kind: "c", err: errBadToken}},
			wantErrs: []error{errBadCert, errBadToken},
			wantRan:  []string{"a", "b", "c"},
		},
		"an empty chain has no credentials": {
			wantErrs: []error{ErrNoCredentials},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ran []string
			var chain Chain
			for _, s := range tc.steps {
				a := stubAuthenticator{kind: s.kind, err: s.err, ran: &ran}
				if s.ok {
					a.caller = caller(s.kind)
				}
				chain = append(chain, a)
			}
			got, err := chain.Authenticate(context.Background())
			if len(tc.wantErrs) > 0 {
				for _, want := range tc.wantErrs {
					if !errors.Is(err, want) {
						t.Errorf("Authenticate() error = %v, want it to wrap %v", err, want)
					}
				}
				if len(tc.wantErrs) > 1 && errors.Is(err, ErrNoCredentials) {
					t.Errorf("Authenticate() error = %v, must not claim no credentials when one was refused", err)
				}
			} else if err != nil || got.Authenticator != tc.wantKind {
				t.Errorf("Authenticate() = %+v, %v; want a caller from %q", got, err, tc.wantKind)
			}
			if len(ran) != len(tc.wantRan) {
				t.Fatalf("ran %q, want %q", ran, tc.wantRan)
			}
			for i := range ran {
				if ran[i] != tc.wantRan[i] {
					t.Fatalf("ran %q, want %q", ran, tc.wantRan)
				}
			}
		})
	}
}

func TestChainOrderUsedByIstiod(t *testing.T) {
	// A request with both a client certificate and a token is authenticated
	// by the certificate; the token is not reviewed.
	ca := newTestCA(t, "root")
	cert, _ := ca.sign(t, workloadTemplate(t, workloadID))
	rev := &fakeReviewer{review: goodReview()}
	chain := Chain{
		NewClientCert(testTD, ca.pool, func() time.Time { return t0 }),
		NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, Clock: func() time.Time { return t0 }}),
	}
	ctx := tlsPeerContext(bearerContext(unsignedJWT(t, map[string]any{"exp": t0.Unix() + 60})), cert)
	caller, err := chain.Authenticate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caller.Authenticator != KindClientCert || rev.Calls() != 0 {
		t.Errorf("authenticated by %q with %d reviews, want %q and none", caller.Authenticator, rev.Calls(), KindClientCert)
	}
	// Without the certificate the token is used.
	caller, err = chain.Authenticate(bearerContext(unsignedJWT(t, map[string]any{"exp": t0.Unix() + 60})))
	if err != nil {
		t.Fatal(err)
	}
	if caller.Authenticator != KindKubernetes {
		t.Errorf("authenticated by %q, want %q", caller.Authenticator, KindKubernetes)
	}
}
