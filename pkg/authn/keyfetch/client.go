// Package keyfetch fetches key material (OIDC discovery documents and JSON
// Web Key Sets) from issuers that may be hostile. Every fetch follows one URL
// rule, connects to no link-local, metadata or unspecified address, follows
// redirects only within the origin, and is bounded in size, time and content
// type; a fetched body never appears in an error or a log line. Key sets
// refresh at most once per interval however many unknown keys are asked for.
//
// Two users: KeySet verifies tokens in istiod (the CSR path's OIDC), and
// JWKSCache keeps the key sets of RequestAuthentications, which proxies
// get inline (RejectAllJWKS where none could be fetched).
package keyfetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultMaxBodyBytes    = 1 << 20
	DefaultRefreshInterval = 5 * time.Minute
	DefaultRetryInterval   = 10 * time.Second
	maxRedirects           = 3
	maxHeaderBytes         = 64 << 10
)

// ErrFetch: a document could not be fetched or is not what was asked for.
var ErrFetch = errors.New("fetch key material")

// Config configures a Client. The zero value is usable.
type Config struct {
	// RootCAs verify issuers' TLS certificates. Default: the system roots,
	// or the roots carried in the binary where the system has none.
	RootCAs *x509.CertPool
	// AllowedPrefixes are addresses that fetches may connect to although
	// they are link-local, metadata or unspecified addresses, refused
	// otherwise. An operator's explicit choice.
	AllowedPrefixes []netip.Prefix
	// Timeout bounds one fetch, body included. Default: DefaultTimeout.
	Timeout time.Duration
	// MaxBodyBytes bounds a fetched document. Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RefreshInterval is the least time between two fetches of a key set
	// that has keys. Default: DefaultRefreshInterval.
	RefreshInterval time.Duration
	// RetryInterval is the least time between two fetches of a key set that
	// has none yet. Default: DefaultRetryInterval.
	RetryInterval time.Duration
	// Clock tells the time. Default: time.Now.
	Clock func() time.Time
	// Logger records fetches and their failures. Default: discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Client fetches key material. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a client. It does no I/O.
func New(cfg Config) *Client {
	cfg.setDefaults()
	return newClient(cfg, addressGuard{refused: refusedPrefixes, allowed: cfg.AllowedPrefixes})
}

// newClient lets tests refuse loopback addresses, which they can serve.
func newClient(cfg Config, guard addressGuard) *Client {
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: guard.control}
	tr := &http.Transport{
		// No proxy: the address guard must see the address connected to.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.RootCAs},
		TLSHandshakeTimeout:    cfg.Timeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4,
		IdleConnTimeout:        90 * time.Second,
	}
	return &Client{cfg: cfg, http: &http.Client{
		Transport:     tr,
		CheckRedirect: sameOrigin,
		Timeout:       cfg.Timeout,
	}}
}

// errCrossOriginRedirect is returned by CheckRedirect; the target is not
// named, since it is what the server answered.
var errCrossOriginRedirect = errors.New("redirect to another scheme or host refused")

// sameOrigin follows a few redirects within the first request's scheme and
// host, and no other.
func sameOrigin(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) || req.URL.User != nil {
		return errCrossOriginRedirect
	}
	if len(via) > maxRedirects {
		return fmt.Errorf("more than %d redirects", maxRedirects)
	}
	return nil
}

// get fetches rawURL, which must pass rule, and returns its body: a 200
// answer with a JSON content type of at most MaxBodyBytes. Errors name the
// URL, the status and the cause, never the body.
func (c *Client) get(ctx context.Context, rawURL string, rule URLRule) ([]byte, error) {
	if err := rule.Check(rawURL); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrFetch, rawURL, err)
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error repeats the URL; keep only its cause.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w %s: %w", ErrFetch, rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %s: status %d", ErrFetch, rawURL, resp.StatusCode)
	}
	if resp.ContentLength > c.cfg.MaxBodyBytes {
		return nil, fmt.Errorf("%w %s: body of %d bytes, limit %d", ErrFetch, rawURL, resp.ContentLength, c.cfg.MaxBodyBytes)
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		return nil, fmt.Errorf("%w %s: status 200 with a content type that is not JSON", ErrFetch, rawURL)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: read body: %w", ErrFetch, rawURL, err)
	}
	if int64(len(body)) > c.cfg.MaxBodyBytes {
		return nil, fmt.Errorf("%w %s: body over %d bytes", ErrFetch, rawURL, c.cfg.MaxBodyBytes)
	}
	return body, nil
}

// isJSON accepts application/json and the JSON-based types such as
// application/jwk-set+json.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
