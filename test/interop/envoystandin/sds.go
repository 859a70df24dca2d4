package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

// sdsClient follows one SotW SDS stream per secret the config names, as
// Envoy does for an envoy_grpc SDS source (pilot-agent's SDS server
// serves StreamSecrets only).
type sdsClient struct {
	boot *bootInfo
	st   *store
	log  *slog.Logger
	// changed is signalled when a secret is accepted, for warming.
	changed chan struct{}

	mu      sync.Mutex
	ctx     context.Context // set by run
	wanted  map[string]secretRef
	streams map[string]context.CancelFunc
	held    map[string]*heldSecret
	wg      sync.WaitGroup
}

type heldSecret struct {
	version string
	chain   []*x509.Certificate // tls_certificate
	roots   *x509.CertPool      // validation_context
}

func newSDS(boot *bootInfo, st *store, log *slog.Logger) *sdsClient {
	return &sdsClient{boot: boot, st: st, log: log, changed: make(chan struct{}, 1),
		wanted: map[string]secretRef{}, streams: map[string]context.CancelFunc{}, held: map[string]*heldSecret{}}
}

func (c *sdsClient) run(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.startLocked()
	c.mu.Unlock()
	<-ctx.Done()
	c.wg.Wait()
	return nil
}

// want makes the open streams those of refs.
func (c *sdsClient) want(refs []secretRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wanted = map[string]secretRef{}
	for _, r := range refs {
		if r.Cluster != "" {
			c.wanted[r.Name] = r
		}
	}
	for name, cancel := range c.streams {
		if _, ok := c.wanted[name]; !ok {
			cancel()
			delete(c.streams, name)
			delete(c.held, name)
			c.st.update(func(s *State) { delete(s.Secrets, name) })
		}
	}
	c.startLocked()
}

func (c *sdsClient) startLocked() {
	if c.ctx == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(c.wanted)) {
		if _, ok := c.streams[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(c.ctx)
		c.streams[name] = cancel
		ref := c.wanted[name]
		c.wg.Go(func() { c.follow(ctx, ref) })
	}
}

func (c *sdsClient) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[name] != nil
}

func (c *sdsClient) follow(ctx context.Context, ref secretRef) {
	backoff := 200 * time.Millisecond
	for {
		err := c.fetch(ctx, ref)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("SDS stream ended; reconnecting", "secret", ref.Name, "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *sdsClient) fetch(ctx context.Context, ref secretRef) error {
	conn, err := dialPipe(c.boot.pipes[ref.Cluster])
	if err != nil {
		return fmt.Errorf("dial %s: %w", ref.Cluster, err)
	}
	defer conn.Close()
	s, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx)
	if err != nil {
		return fmt.Errorf("open SDS: %w", err)
	}
	stream := "sds " + ref.Name
	c.st.update(func(st *State) { st.secret(ref).Streams++ })
	send := func(req *discoveryv3.DiscoveryRequest, what string) error {
		req.TypeUrl, req.ResourceNames = typeSecret, []string{ref.Name}
		if err := s.Send(req); err != nil {
			return fmt.Errorf("send SDS %s: %w", what, err)
		}
		c.st.update(func(st *State) {
			st.event(Event{Sent: true, Stream: stream, Type: "SDS", What: what, Nonce: req.ResponseNonce,
				Subscribe: req.ResourceNames, Detail: req.GetErrorDetail().GetMessage()})
		})
		return nil
	}
	if err := send(&discoveryv3.DiscoveryRequest{Node: c.boot.node}, "subscribe"); err != nil {
		return err
	}
	accepted := ""
	for {
		r, err := s.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		c.st.update(func(st *State) {
			st.event(Event{Stream: stream, Type: "SDS", What: "response", Nonce: r.GetNonce(), Detail: r.GetVersionInfo()})
		})
		h, status, err := decodeSecret(ref.Name, r)
		if err != nil {
			c.log.Warn("rejecting secret", "secret", ref.Name, "err", err)
			c.st.update(func(st *State) {
				ss := st.secret(ref)
				ss.NACKs++
				ss.LastNACK = err.Error()
			})
			nack := &discoveryv3.DiscoveryRequest{VersionInfo: accepted, ResponseNonce: r.GetNonce(),
				ErrorDetail: &rpcstatus.Status{Code: int32(codes.Internal), Message: err.Error()}}
			if err := send(nack, "nack"); err != nil {
				return err
			}
			continue
		}
		accepted = r.GetVersionInfo()
		c.accept(ref, h, status)
		if err := send(&discoveryv3.DiscoveryRequest{VersionInfo: accepted, ResponseNonce: r.GetNonce()}, "ack"); err != nil {
			return err
		}
	}
}

func (s *State) secret(ref secretRef) *SecretStatus {
	if s.Secrets[ref.Name] == nil {
		s.Secrets[ref.Name] = &SecretStatus{Cluster: ref.Cluster}
	}
	return s.Secrets[ref.Name]
}

// accept holds a secret and verifies every chain against every root.
func (c *sdsClient) accept(ref secretRef, h *heldSecret, status SecretStatus) {
	c.mu.Lock()
	c.held[ref.Name] = h
	verified := map[string]string{}
	failed := map[string]string{}
	for name, s := range c.held {
		if len(s.chain) == 0 {
			continue
		}
		inter := x509.NewCertPool()
		for _, ic := range s.chain[1:] {
			inter.AddCert(ic)
		}
		var errs []error
		for _, rootName := range slices.Sorted(maps.Keys(c.held)) {
			roots := c.held[rootName].roots
			if roots == nil {
				continue
			}
			_, err := s.chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			if err == nil {
				verified[name] = rootName
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", rootName, err))
		}
		if verified[name] == "" {
			failed[name] = "no validation context secret held"
			if err := errors.Join(errs...); err != nil {
				failed[name] = err.Error()
			}
		}
	}
	// The state is updated before another stream's secret can be held:
	// in the order of the verifications, so an older one never wins.
	c.st.update(func(st *State) {
		ss := st.secret(ref)
		ss.Version, ss.Kind, ss.CertificateChain, ss.KeyMatches, ss.TrustedCA =
			h.version, status.Kind, status.CertificateChain, status.KeyMatches, status.TrustedCA
		ss.ACKs++
		for name, s := range st.Secrets {
			if s.Kind == "tls_certificate" {
				s.VerifiedBy, s.VerifyError = verified[name], failed[name]
			}
		}
	})
	c.mu.Unlock()
	c.log.Info("secret accepted", "secret", ref.Name, "kind", status.Kind)
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// decodeSecret checks an SDS response for one secret as Envoy's SDS API
// does: one Secret of the name asked for, valid, its certificate and key
// loadable and matching, or its trusted CA parseable.
func decodeSecret(name string, r *discoveryv3.DiscoveryResponse) (*heldSecret, SecretStatus, error) {
	var status SecretStatus
	if r.GetTypeUrl() != typeSecret {
		return nil, status, fmt.Errorf("SDS response of type %s", r.GetTypeUrl())
	}
	if len(r.GetResources()) != 1 {
		return nil, status, fmt.Errorf("missing SDS resources for %s in onConfigUpdate(): %d resources", name, len(r.GetResources()))
	}
	var sec tlsv3.Secret
	if err := r.GetResources()[0].UnmarshalTo(&sec); err != nil {
		return nil, status, fmt.Errorf("secret %s: %w", name, err)
	}
	if sec.GetName() != name {
		return nil, status, fmt.Errorf("unexpected SDS secret (expecting %s): %s", name, sec.GetName())
	}
	if err := validateTree(&sec); err != nil {
		return nil, status, fmt.Errorf("secret %s: %w", name, err)
	}
	h := &heldSecret{version: r.GetVersionInfo()}
	switch {
	case sec.GetTlsCertificate() != nil:
		tc := sec.GetTlsCertificate()
		chainPEM := slices.Concat(tc.GetCertificateChain().GetInlineBytes(), []byte(tc.GetCertificateChain().GetInlineString()))
		keyPEM := slices.Concat(tc.GetPrivateKey().GetInlineBytes(), []byte(tc.GetPrivateKey().GetInlineString()))
		pair, err := tls.X509KeyPair(chainPEM, keyPEM)
		if err != nil {
			return nil, status, fmt.Errorf("secret %s: failed to load certificate chain and private key: %w", name, err)
		}
		for _, der := range pair.Certificate {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, status, fmt.Errorf("secret %s: %w", name, err)
			}
			h.chain = append(h.chain, c)
		}
		status.Kind, status.CertificateChain, status.KeyMatches = "tls_certificate", string(chainPEM), true
	case sec.GetValidationContext() != nil:
		ca := sec.GetValidationContext().GetTrustedCa()
		caPEM := slices.Concat(ca.GetInlineBytes(), []byte(ca.GetInlineString()))
		h.roots = x509.NewCertPool()
		n := 0
		for rest := caPEM; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, status, fmt.Errorf("secret %s: trusted CA: %w", name, err)
			}
			h.roots.AddCert(c)
			n++
		}
		if n == 0 {
			return nil, status, fmt.Errorf("secret %s: trusted CA holds no certificate", name)
		}
		status.Kind, status.TrustedCA = "validation_context", string(caPEM)
	default:
		return nil, status, fmt.Errorf("secret %s: neither a TLS certificate nor a validation context", name)
	}
	return h, status, nil
}
