package authn

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenReviewer asks the Kubernetes API server to authenticate a token.
type TokenReviewer interface {
	// Review returns the API server's verdict on token for audiences. An
	// error means no verdict was obtained; an unauthenticated token is a
	// review with Authenticated false.
	Review(ctx context.Context, token string, audiences []string) (*TokenReview, error)
}

// RemoteReviewers gives the TokenReviewer of a remote cluster.
type RemoteReviewers interface {
	// Reviewer returns the reviewer of cluster id, false when no such
	// cluster is registered.
	Reviewer(id string) (TokenReviewer, bool)
}

// RemoteReviewersFunc adapts a function to RemoteReviewers.
type RemoteReviewersFunc func(id string) (TokenReviewer, bool)

// Reviewer implements RemoteReviewers.
func (f RemoteReviewersFunc) Reviewer(id string) (TokenReviewer, bool) { return f(id) }

var _ RemoteReviewers = RemoteReviewersFunc(nil)

// TokenReview is the status of a Kubernetes TokenReview.
type TokenReview struct {
	Authenticated bool
	// Audiences are the audiences the token was found valid for.
	Audiences []string
	Username  string
	Groups    []string
	Extra     map[string][]string
	// Error is the API server's reason for not authenticating the token.
	Error string
}

// TokenReviewerFunc adapts a function to TokenReviewer.
type TokenReviewerFunc func(ctx context.Context, token string, audiences []string) (*TokenReview, error)

// Review implements TokenReviewer.
func (f TokenReviewerFunc) Review(ctx context.Context, token string, audiences []string) (*TokenReview, error) {
	return f(ctx, token, audiences)
}

var _ TokenReviewer = TokenReviewerFunc(nil)

// clientGoReviewer creates TokenReviews through client-go.
type clientGoReviewer struct {
	client kubernetes.Interface
}

// NewClientGoReviewer returns a TokenReviewer that creates
// authentication.k8s.io/v1 TokenReviews with client.
func NewClientGoReviewer(client kubernetes.Interface) TokenReviewer {
	return &clientGoReviewer{client: client}
}

// Review implements TokenReviewer.
func (r *clientGoReviewer) Review(ctx context.Context, token string, audiences []string) (*TokenReview, error) {
	req := &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}
	resp, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create token review: %w", err)
	}
	if resp == nil {
		return nil, errors.New("create token review: empty response")
	}
	st := resp.Status
	review := &TokenReview{
		Authenticated: st.Authenticated,
		Audiences:     st.Audiences,
		Username:      st.User.Username,
		Groups:        st.User.Groups,
		Error:         st.Error,
	}
	if len(st.User.Extra) > 0 {
		review.Extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			review.Extra[k] = []string(v)
		}
	}
	return review, nil
}
