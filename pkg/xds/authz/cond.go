package authz

import (
	"errors"
	"fmt"
	"unicode/utf8"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// cond is one condition of a rule: a from.source or to.operation field, or
// a `when` entry, with the values it matches and those it must not match.
type cond struct {
	attr        *attr
	key         string // the `when` key as written, or the field's name
	when        bool   // whether key is a `when` key
	where       string // the field, for problems: "from[0].source.principals", "when[1]"
	valuesAt    string // where the values are: the field itself, or "when[1].values"
	notValuesAt string
	values      []string
	notValues   []string
}

// fieldCond is the condition of a from.source or to.operation field: one
// list, positive or negated.
func fieldCond(a *attr, name, where string, values []string, negated bool) cond {
	c := cond{attr: a, key: name, where: where, valuesAt: where, notValuesAt: where}
	if negated {
		c.notValues = values
	} else {
		c.values = values
	}
	return c
}

// The two sides of RBAC: a condition on the peer is a principal, one on
// the request or connection a permission.
type side[T any] struct {
	gen        func(a *attr) func(gen, string) (T, error)
	or         func([]T) T
	not        func(T) T
	noIdentity func() T // nil where no identity condition lives
}

var principals = side[*rbacpb.Principal]{
	gen:        func(a *attr) func(gen, string) (*rbacpb.Principal, error) { return a.principal },
	or:         orPrincipals,
	not:        notPrincipal,
	noIdentity: noIdentity,
}

var permissions = side[*rbacpb.Permission]{
	gen: func(a *attr) func(gen, string) (*rbacpb.Permission, error) { return a.permission },
	or:  orPermissions,
	not: notPermission,
}

// compile translates c into the matchers that all must hold, failing closed
// through b: on anything it cannot translate, an ALLOW rule is dropped and
// a DENY rule matches more (the positive values are ignored as a whole, a
// bad not-value alone).
func compile[T any](b *ruleBuilder, s side[T], c cond) []T {
	a := c.attr
	switch {
	case a.jwt && b.t.opts.Flavor == GRPC:
		b.fail(c.where, "request authentication (JWT) is not supported on proxyless gRPC, which has no jwt_authn", true)
		return nil
	case !a.grpc && b.t.opts.Flavor == GRPC:
		b.fail(c.where, fmt.Sprintf("%s is not supported on proxyless gRPC", c.key), true)
		return nil
	case a.httpOnly && b.t.forTCP:
		// As Istio: expected on a TCP chain, so not a problem of the policy.
		b.fail(c.where, c.key+" is HTTP only", false)
		return nil
	case len(c.values) == 0 && len(c.notValues) == 0:
		b.fail(c.where, "no values", true)
		return nil
	}
	g := gen{opts: b.t.opts, namespace: b.policy.Namespace, key: c.key}
	var out []T
	if len(c.values) > 0 {
		g.grant = b.allow()
		if ms, ok := compileValues(b, s, a, g, c, c.valuesAt, c.values, false); ok {
			if b.denyIdentityless() && a.identity && s.noIdentity != nil {
				// No identity cannot prove it is not the one denied.
				ms = append(ms, s.noIdentity())
			}
			out = append(out, s.or(ms))
		}
	}
	if len(c.notValues) > 0 {
		g.grant = !b.allow()
		if ms, _ := compileValues(b, s, a, g, c, c.notValuesAt, c.notValues, true); len(ms) > 0 {
			out = append(out, s.not(s.or(ms)))
		}
	}
	return out
}

// compileValues translates each value; ok is false when one failed. For a
// negated list (of a DENY rule) the values that did translate are returned.
// Whether a value can be applied is package policy's rule
// (policy.CheckRuleValue), which the webhook follows too.
func compileValues[T any](b *ruleBuilder, s side[T], a *attr, g gen, c cond, at string, values []string, negated bool) (ms []T, ok bool) {
	ok = true
	if msg := policy.CheckRuleValues(c.key, c.when, values); msg != "" {
		b.fail(at, msg, true)
		return nil, false
	}
	for i, v := range values {
		var m T
		var err error
		switch {
		case v == "":
			err = errEmpty
		case !utf8.ValidString(v):
			err = fmt.Errorf("value is not UTF-8")
		default:
			if msg := policy.CheckRuleValue(c.key, c.when, v); msg != "" {
				err = errors.New(msg)
			} else {
				m, err = s.gen(a)(g, v)
			}
		}
		if err != nil {
			b.fail(fmt.Sprintf("%s[%d]", at, i), err.Error(), true)
			ok = false
			continue
		}
		ms = append(ms, m)
	}
	if !ok && !negated {
		return nil, false
	}
	return ms, ok
}
