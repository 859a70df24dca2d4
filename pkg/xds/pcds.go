package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
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

// proxyConfigLocked is the PCDS resource of the trust bundle in force.
func (p *proxy) proxyConfigLocked() []generated {
	b := p.srv.cfg.TrustBundle.Current()
	if b == nil || len(b.Roots) == 0 {
		return nil
	}
	g, err := proxyConfigResource(b)
	if err != nil {
		p.srv.log.Error("generating the trust bundle's ProxyConfig; leaving it out", "err", err)
		return nil
	}
	return []generated{g}
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
			s.pushType(TypeProxyConfig)
		}
	}
}
