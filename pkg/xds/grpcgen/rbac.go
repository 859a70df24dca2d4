package grpcgen

import (
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
)

// rbacFilters translates the AuthorizationPolicies that select a server
// into its RBAC filters: a DENY filter, then an ALLOW filter, each only
// when a policy of its action exists. The translation, and how it fails
// closed on what gRPC cannot evaluate, is package authz's (GRPC flavor).
func (g *Generator) rbacFilters(policies []*model.AuthorizationPolicy) ([]*hcm.HttpFilter, error) {
	return authz.HTTPFilters(policies, authz.Options{TrustDomain: g.TrustDomain, Flavor: authz.GRPC})
}
