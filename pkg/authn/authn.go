// Package authn authenticates the callers of istiod's gRPC APIs: by client
// certificate, OIDC JWT or Kubernetes service-account JWT (TokenReview).
package authn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Authenticator kinds, as recorded on a Caller and in logs and metrics.
const (
	KindClientCert = "clientcert"
	KindOIDC       = "oidc"
	KindKubernetes = "kubernetes"
)

// ErrNoCredentials is returned by an Authenticator when the request carries
// no credential of its kind, so that a Chain moves on to the next one.
var ErrNoCredentials = errors.New("no credentials")

// Caller is an authenticated peer.
type Caller struct {
	// Identities are the SPIFFE IDs the caller proved. Never empty.
	Identities []spiffeid.ID
	// Authenticator is the kind that authenticated the caller (Kind…).
	Authenticator string
	// Pod is the Kubernetes pod a bound service-account token names, if any.
	Pod *Pod
	// ClusterID is the cluster whose API server authenticated the caller: for
	// a Kubernetes token, the cluster its "clusterid" header named once that
	// cluster's review succeeded (istiod's own ID for a local review); empty
	// for a client certificate or an OIDC token, which bind the caller to
	// istiod's own cluster. Never a value the caller merely claimed.
	ClusterID string
}

// Pod identifies the pod a service-account token was bound to.
type Pod struct {
	Name string
	UID  string
}

// Authenticator authenticates the gRPC caller whose peer and incoming
// metadata are in ctx.
type Authenticator interface {
	// Kind names the authenticator (Kind…).
	Kind() string
	// Authenticate returns the caller, ErrNoCredentials when the request holds
	// no credential of this kind, or another error when the credential is bad.
	Authenticate(ctx context.Context) (*Caller, error)
}

// Chain tries its authenticators in order and returns the first success.
type Chain []Authenticator

var _ Authenticator = Chain(nil)

// Kind implements Authenticator.
func (Chain) Kind() string { return "chain" }

// Authenticate implements Authenticator. When every authenticator fails, the
// error wraps each failure; when none found credentials it is ErrNoCredentials.
func (c Chain) Authenticate(ctx context.Context) (*Caller, error) {
	var failures []error
	for _, a := range c {
		caller, err := a.Authenticate(ctx)
		if err == nil {
			return caller, nil
		}
		if !errors.Is(err, ErrNoCredentials) {
			failures = append(failures, fmt.Errorf("%s: %w", a.Kind(), err))
		}
	}
	if len(failures) == 0 {
		return nil, ErrNoCredentials
	}
	return nil, joinFailures(failures)
}

// joinFailures keeps every cause for errors.Is/As and prints them on one line.
func joinFailures(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return &chainError{msg: strings.Join(msgs, "; "), errs: errs}
}

type chainError struct {
	msg  string
	errs []error
}

func (e *chainError) Error() string   { return "authentication failed: " + e.msg }
func (e *chainError) Unwrap() []error { return e.errs }
