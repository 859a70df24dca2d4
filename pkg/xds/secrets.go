package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
	// Generate may wait (a permission check): it is never called with a
	// proxy's lock held.
	Generate(ctx context.Context, p sds.Proxy, names []string) []*tlsv3.Secret
	// Watch reports, by calling changed, the changes of what Generate
	// gives p for the names last Set on the Watch.
	Watch(p sds.Proxy, changed func()) *sds.Watch
}

var _ SecretSource = (*sds.Server)(nil)

// secretPushers bounds how many proxies' secrets are generated at once
// after changes: each may wait for a permission check.
const secretPushers = 8

// secretQueue is the proxies told that their secrets changed, for
// watchSecrets to answer.
type secretQueue struct {
	wake  chan struct{} // made by New
	mu    sync.Mutex
	dirty map[*proxy]struct{}
}

func (q *secretQueue) add(p *proxy) {
	q.mu.Lock()
	if q.dirty == nil {
		q.dirty = map[*proxy]struct{}{}
	}
	q.dirty[p] = struct{}{}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *secretQueue) take() map[*proxy]struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dirty
	q.dirty = nil
	return d
}

// generated is one resource of a response, marshalled.
type generated struct {
	name  string
	hash  string
	any   *anypb.Any
	delta *discovery.Resource // see builtResource; nil for what is not shared (secrets)
}

// resource is g as an incremental response carries it.
func (g generated) resource() *discovery.Resource {
	if g.delta != nil {
		return g.delta
	}
	return &discovery.Resource{Name: g.name, Version: g.hash, Resource: g.any}
}

// readySecrets is what refreshSecrets generated for a subscription, for
// responseLocked to send.
type readySecrets struct {
	key string // the subscription's names
	gen []generated
}

// refreshSecrets answers the stream's open Secret request, if any, with
// what it asks for now, and watches those names for changes. Generation,
// and with it the permission checks, runs without p.mu, so that a slow
// check holds up neither the proxy's other types nor other proxies;
// secretMu keeps one generation of the stream at a time, so an older
// one never overtakes a newer.
func (p *proxy) refreshSecrets() {
	p.secretMu.Lock()
	defer p.secretMu.Unlock()
	p.mu.Lock()
	if p.closed || p.node == nil || p.debug != nil {
		p.mu.Unlock()
		return
	}
	sub, asked, open := p.secretRequestLocked()
	if p.secretWatch == nil {
		p.secretWatch = p.srv.cfg.Secrets.Watch(p.sp, func() { p.srv.secretQueue.add(p) })
	}
	w, sp := p.secretWatch, p.sp
	p.mu.Unlock()
	if !asked {
		return
	}
	w.Set(sub.names)
	if !open {
		return // the proxy's next request is answered
	}
	gen := p.generateSecrets(sp, sub.names)
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, _, open := p.secretRequestLocked(); p.closed || !open || cur.key != sub.key {
		return // asked again meanwhile: that request's refresh answers
	}
	p.ready = readySecrets{key: sub.key, gen: gen}
	defer func() { p.ready = readySecrets{} }()
	st := p.srv.state.Load()
	if w := p.watches[typeSecret]; w != nil {
		p.respondLocked(typeSecret, w, st)
	}
	if d := p.delta[typeSecret]; d != nil {
		p.respondDeltaLocked(typeSecret, d, st)
	}
}

// secretRequestLocked returns the Secret names the stream subscribes to,
// whether it subscribed at all, and whether a request awaits an answer.
func (p *proxy) secretRequestLocked() (sub subscription, asked, open bool) {
	if d := p.delta[typeSecret]; d != nil {
		return d.names.subscription(d.wildcard), true, d.open
	}
	sub, asked = p.subs[typeSecret]
	return sub, asked, p.watches[typeSecret] != nil
}

// secretsLocked returns the secrets refreshSecrets generated for sub.
// They are never shared between proxies.
func (p *proxy) secretsLocked(sub subscription) []generated {
	if p.ready.key != sub.key {
		// Only refreshSecrets answers Secret requests, for the names it
		// generated.
		p.srv.log.Error("secrets asked for other names than generated", "node", p.node.GetId())
	}
	return p.ready.gen
}

// generateSecrets returns the secrets of names the proxy may have, from
// the SecretSource. It may wait: never call it holding p.mu.
func (p *proxy) generateSecrets(sp sds.Proxy, names []string) []generated {
	var out []generated
	for _, sec := range p.srv.cfg.Secrets.Generate(p.ctx, sp, names) {
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

// closeSecrets ends the stream's Watch.
func (p *proxy) closeSecrets() {
	p.mu.Lock()
	w := p.secretWatch
	p.closed = true
	p.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// watchSecrets answers, until ctx is done, the proxies whose secrets
// changed: only those, each once however many changes came meanwhile, up
// to secretPushers at a time, so that a proxy waiting for a permission
// check holds up neither the others nor the changes that follow.
func (s *Server) watchSecrets(ctx context.Context) {
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, secretPushers)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.secretQueue.wake:
		}
		for p := range s.secretQueue.take() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			running.Go(func() {
				defer func() { <-slots }()
				p.refreshSecrets()
			})
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
