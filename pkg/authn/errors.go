package authn

import "errors"

// Reasons a credential is refused. Authenticators wrap them with detail, so
// match them with errors.Is. They are for logs and metrics: the gRPC layer
// answers every refusal with the same opaque Unauthenticated status.
var (
	// ErrTokenTooLarge: a bearer token is longer than MaxTokenSize.
	ErrTokenTooLarge = errors.New("token too large")
	// ErrMalformedMetadata: the authorization or clusterid metadata is
	// repeated, oversized or not in the expected form.
	ErrMalformedMetadata = errors.New("malformed request metadata")
	// ErrInvalidCertificate: a client certificate does not verify against the
	// current trust bundle, or is not usable as a workload certificate.
	ErrInvalidCertificate = errors.New("invalid client certificate")
	// ErrInvalidToken: a token's signature, issuer, audience, validity period
	// or review status is not acceptable.
	ErrInvalidToken = errors.New("invalid token")
	// ErrInvalidIdentity: the identity a credential names (URI SAN, username,
	// sub) is not a service account of the expected shape and trust domain.
	ErrInvalidIdentity = errors.New("invalid identity")
	// ErrUnavailable: a dependency needed to judge the credential (the
	// TokenReview API, OIDC discovery) could not be reached. Authentication
	// fails closed.
	ErrUnavailable = errors.New("authentication backend unavailable")
	// ErrUnknownCluster: a Kubernetes token names, in its "clusterid"
	// header, a cluster that is neither istiod's own nor a registered remote
	// one.
	ErrUnknownCluster = errors.New("unknown cluster")
)
