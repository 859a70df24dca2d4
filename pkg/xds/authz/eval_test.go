package authz

import (
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"

	"github.com/bulwark-mesh/bulwark/pkg/xds/authz/rbactest"
)

// req is a request (or connection) as RBAC sees it. Zero fields take the
// defaults of withDefaults.
type req = rbactest.Request

func withDefaults(r req) req {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&r.Src, "10.0.0.9")
	def(&r.Remote, r.Src)
	def(&r.Dst, "10.0.0.2")
	def(&r.Method, "GET")
	def(&r.Path, "/")
	def(&r.Host, "echo.app")
	if r.Port == 0 {
		r.Port = 8080
	}
	return r
}

// allowed decides r, with defaults, as the data plane of flavor would on
// an HTTP chain, or with tcp on a TCP chain.
func allowed(t testing.TB, flavor Flavor, tcp bool, filters []*rbacpb.RBAC, r req) bool {
	t.Helper()
	e := rbactest.Envoy(t, tcp)
	if flavor == GRPC {
		e = rbactest.GRPC(t)
	}
	return e.Allowed(filters, withDefaults(r))
}
