package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/bulwark-mesh/bulwark/pkg/sds"
)

const typeSecret = sds.TypeURL

// SecretSource generates the Secret resources (SDS) a proxy may have;
// *sds.Server is one. It is asked only for names a proxy subscribed to.
type SecretSource interface {
	Generate(ctx context.Context, p sds.Proxy, names []string) []*tlsv3.Secret
	// Subscribe reports changes of anything Generate returns.
	Subscribe() (<-chan struct{}, func())
}

var _ SecretSource = (*sds.Server)(nil)

// generated is one resource of a response, marshalled.
type generated struct {
	name  string
	hash  string
	any   *anypb.Any
	built *builtResource // nil for what is not shared (secrets)
}

// secretsLocked returns the secrets of names the proxy may have. They come
// from the SecretSource and are never shared between proxies.
func (p *proxy) secretsLocked(names []string) []generated {
	var out []generated
	for _, sec := range p.srv.cfg.Secrets.Generate(p.ctx, p.sp, names) {
		g, err := marshalSecret(sec)
		if err != nil {
			p.srv.log.Error("generating resource; leaving it out", "type", shortType(typeSecret), "name", sec.GetName(), "err", err)
			continue
		}
		out = append(out, g)
	}
	return out
}

func marshalSecret(sec *tlsv3.Secret) (generated, error) {
	if err := sec.ValidateAll(); err != nil {
		return generated{}, fmt.Errorf("resource %s: %w", sec.GetName(), err)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(sec)
	if err != nil {
		return generated{}, fmt.Errorf("marshal %s: %w", sec.GetName(), err)
	}
	sum := sha256.Sum256(raw)
	return generated{
		name: sec.GetName(),
		hash: hex.EncodeToString(sum[:8]),
		any:  &anypb.Any{TypeUrl: typeSecret, Value: raw},
	}, nil
}

// pushType answers every open watch of typeURL whose content changed:
// secrets and the trust bundle change apart from the model.
func (s *Server) pushType(typeURL string) {
	st := s.state.Load()
	s.mu.Lock()
	proxies := make([]*proxy, 0, len(s.streams))
	for _, p := range s.streams {
		proxies = append(proxies, p)
	}
	s.mu.Unlock()
	for _, p := range proxies {
		p.mu.Lock()
		if p.node != nil && p.debug == nil {
			if w := p.watches[typeURL]; w != nil {
				p.respondLocked(typeURL, w, st)
			}
			if d := p.delta[typeURL]; d != nil {
				p.respondDeltaLocked(typeURL, d, st)
			}
		}
		p.mu.Unlock()
	}
}

// watchSecrets pushes secret changes until ctx is done.
func (s *Server) watchSecrets(ctx context.Context) {
	changes, cancel := s.cfg.Secrets.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
			s.pushType(typeSecret)
		}
	}
}

// knownType reports whether typeURL is served.
func (s *Server) knownType(typeURL string) bool {
	return knownTypes[typeURL] || (typeURL == typeSecret && s.cfg.Secrets != nil) ||
		(typeURL == TypeProxyConfig && s.cfg.TrustBundle != nil)
}

// tlsStream reports whether the stream of ctx runs over TLS: secrets are
// never served on the plaintext port.
func tlsStream(ctx context.Context) bool {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.AuthInfo == nil {
		return false
	}
	_, ok = pr.AuthInfo.(credentials.TLSInfo)
	return ok
}
