package authn

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// serviceAccountPrefix starts a Kubernetes service-account username:
// "system:serviceaccount:<namespace>:<name>".
const serviceAccountPrefix = "system:serviceaccount:"

// serviceAccount is a Kubernetes service account.
type serviceAccount struct {
	Namespace string
	Name      string
}

// parseServiceAccountUsername parses "system:serviceaccount:<ns>:<sa>". It
// insists on exactly four colon-separated parts, both names non-empty, so
// that "system:serviceaccount:a:b:c" cannot be read as namespace "a".
func parseServiceAccountUsername(username string) (serviceAccount, error) {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	if !ok {
		return serviceAccount{}, fmt.Errorf("username %q is not a service account: %w", username, ErrInvalidIdentity)
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return serviceAccount{}, fmt.Errorf("username %q is not system:serviceaccount:<namespace>:<name>: %w", username, ErrInvalidIdentity)
	}
	return serviceAccount{Namespace: parts[0], Name: parts[1]}, nil
}

// spiffeID returns spiffe://<td>/ns/<namespace>/sa/<name>, refusing names
// that are not valid SPIFFE path segments.
func (a serviceAccount) spiffeID(td spiffeid.TrustDomain) (spiffeid.ID, error) {
	id, err := spiffeid.FromSegments(td, "ns", a.Namespace, "sa", a.Name)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("service account %s/%s: %w: %w", a.Namespace, a.Name, ErrInvalidIdentity, err)
	}
	return id, nil
}

// identityFromUsername maps a service-account username to its SPIFFE ID.
func identityFromUsername(td spiffeid.TrustDomain, username string) (spiffeid.ID, serviceAccount, error) {
	sa, err := parseServiceAccountUsername(username)
	if err != nil {
		return spiffeid.ID{}, serviceAccount{}, err
	}
	id, err := sa.spiffeID(td)
	if err != nil {
		return spiffeid.ID{}, serviceAccount{}, err
	}
	return id, sa, nil
}

// checkWorkloadID accepts an ID of trust domain td and path
// /ns/<namespace>/sa/<name>.
func checkWorkloadID(td spiffeid.TrustDomain, id spiffeid.ID) error {
	if td.IsZero() {
		return fmt.Errorf("no trust domain configured: %w", ErrInvalidIdentity)
	}
	if !id.MemberOf(td) {
		return fmt.Errorf("%s is not in trust domain %s: %w", id, td, ErrInvalidIdentity)
	}
	segs := strings.Split(id.Path(), "/")
	if len(segs) != 5 || segs[0] != "" || segs[1] != "ns" || segs[3] != "sa" || segs[2] == "" || segs[4] == "" {
		return fmt.Errorf("%s is not of the form /ns/<namespace>/sa/<name>: %w", id, ErrInvalidIdentity)
	}
	return nil
}
