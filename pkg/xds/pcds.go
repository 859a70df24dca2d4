package xds

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// TypeProxyConfig is Istio's PCDS: one unnamed istio.mesh.v1alpha1.ProxyConfig
// whose caCertificatesPem is the mesh's trust bundle. pilot-agent asks for
// it on connect when PROXY_CONFIG_XDS_AGENT=true, adds the roots to the
// ROOTCA it serves its proxy, and ACKs it to istiod itself.
const TypeProxyConfig = "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig"

// TrustBundle is the mesh's trust bundle as it changes; *ca.CA is one.
type TrustBundle interface {
	Current() *ca.Bundle
	Subscribe() (updates <-chan *ca.Bundle, cancel func())
}

// proxyConfigResource is the PCDS resource of bundle b: every root, each
// as its own PEM block, in the bundle's order.
func proxyConfigResource(b *ca.Bundle) (generated, error) {
	pc := &meshv1alpha1.ProxyConfig{}
	for _, root := range b.Roots {
		pc.CaCertificatesPem = append(pc.CaCertificatesPem, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw})))
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(pc)
	if err != nil {
		return generated{}, err
	}
	sum := sha256.Sum256(raw)
	return generated{name: "", hash: hex.EncodeToString(sum[:8]), any: &anypb.Any{TypeUrl: TypeProxyConfig, Value: raw}}, nil
}

// proxyConfigLocked is the PCDS response of the trust bundle in force,
// noted with the roots it holds.
func (p *proxy) proxyConfigLocked(key sharedKey) *response {
	r := &response{}
	b := p.srv.cfg.TrustBundle.Current()
	if b != nil && len(b.Roots) > 0 {
		g, err := proxyConfigResource(b)
		if err != nil {
			p.srv.log.Error("generating the trust bundle's ProxyConfig; leaving it out", "err", err)
		} else {
			r.gen = []generated{g}
		}
	}
	r.finish(key)
	if r.gen != nil {
		p.srv.bundles.note(r.gen[0].hash, b)
	}
	return r
}

// bundle is the content hash of a PCDS response's trust bundle, which
// state-of-the-world and incremental streams send alike; "" for other
// types.
func (r *response) bundle(typeURL string) string {
	if typeURL != TypeProxyConfig {
		return ""
	}
	return r.versions[""]
}

// bundleVersions remembers which roots the recent PCDS contents carry, by
// content hash, so that an ACK names the roots a proxy holds.
type bundleVersions struct {
	mu    sync.Mutex
	order []string                       // oldest first
	roots map[string][][sha256.Size]byte // by version
}

// maxBundleVersions bounds the versions remembered: a proxy that ACKed an
// older one is asked to catch up anyway.
const maxBundleVersions = 16

func (v *bundleVersions) note(content string, b *ca.Bundle) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.roots[content]; ok {
		return
	}
	if v.roots == nil {
		v.roots = map[string][][sha256.Size]byte{}
	}
	if len(v.order) == maxBundleVersions {
		delete(v.roots, v.order[0])
		v.order = v.order[1:]
	}
	sums := make([][sha256.Size]byte, len(b.Roots))
	for i, r := range b.Roots {
		sums[i] = sha256.Sum256(r.Raw)
	}
	v.order = append(v.order, content)
	v.roots[content] = sums
}

// holds reports whether the PCDS content carries root.
func (v *bundleVersions) holds(content string, root *x509.Certificate) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Contains(v.roots[content], sha256.Sum256(root.Raw))
}

// ProxiesWithoutRoot names ("<pod>.<namespace>") the connected proxies
// whose last ACKed trust bundle (PCDS) lacks root, those that never asked
// for it included: root rotation waits for them. /debug/syncz marks them
// from then on.
func (s *Server) ProxiesWithoutRoot(root *x509.Certificate) []string {
	s.rotationRoot.Store(root)
	var out []string
	for _, p := range s.proxies() {
		if name, lacks := p.lacksRoot(root); lacks {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// lacksRoot reports whether the proxy has not ACKed a bundle with root;
// debug clients and streams not yet authenticated are not proxies.
func (p *proxy) lacksRoot(root *x509.Certificate) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node == nil || p.debug != nil {
		return "", false
	}
	return identity.ProxyID(p.node), !p.srv.bundles.holds(p.bundleAcked, root)
}

// watchTrustBundle pushes PCDS on every change of the trust bundle until
// ctx is done.
func (s *Server) watchTrustBundle(ctx context.Context) {
	updates, cancel := s.cfg.TrustBundle.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-updates:
			if !ok {
				return
			}
			s.pushProxyConfig()
		}
	}
}

// pushProxyConfig answers every open PCDS watch whose content changed: the
// trust bundle changes apart from the model.
func (s *Server) pushProxyConfig() {
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
			if w := p.watches[TypeProxyConfig]; w != nil {
				p.respondLocked(TypeProxyConfig, w, st)
			}
			if d := p.delta[TypeProxyConfig]; d != nil {
				p.respondDeltaLocked(TypeProxyConfig, d, st)
			}
		}
		p.mu.Unlock()
	}
}
