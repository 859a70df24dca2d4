package authz

import (
	"fmt"
	"strings"
	"unicode/utf8"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	securityv1 "istio.io/api/security/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// ruleBuilder translates one rule of one policy.
type ruleBuilder struct {
	t       *translator
	policy  *model.AuthorizationPolicy
	index   int
	action  securityv1.AuthorizationPolicy_Action // ALLOW, DENY or AUDIT
	dropped bool
}

func (b *ruleBuilder) allow() bool { return b.action == securityv1.AuthorizationPolicy_ALLOW }

// denyIdentityless is whether identity conditions also match a peer
// without an identity: in DENY rules, where that denies more than Istio.
func (b *ruleBuilder) denyIdentityless() bool { return b.action == securityv1.AuthorizationPolicy_DENY }

// fail records that the rule cannot be translated as written at where:
// an ALLOW rule is dropped, other rules go on without the part (the caller
// leaves it out). report is false for what is expected, not a problem of
// the policy (HTTP fields on a TCP chain).
func (b *ruleBuilder) fail(where, reason string, report bool) {
	effect := Widened
	if b.allow() {
		effect = Dropped
		b.dropped = true
	}
	if report {
		b.t.problems = append(b.t.problems, Problem{
			Policy: b.policy.Meta, Rule: b.index, Field: where, Reason: reason, Effect: effect,
		})
	}
}

// build returns the rule's RBAC policy, nil when it is dropped. As Istio:
// each `from` becomes a principal and each `to` a permission, the `when`
// conditions joining whichever side they test; the policy matches when one
// principal and one permission match.
func (b *ruleBuilder) build(r *securityv1.Rule) *rbacpb.Policy {
	if r == nil {
		b.fail("", "rule is null", true)
		if b.dropped {
			return nil
		}
		return matchAlways()
	}
	var whenPrincipals []*rbacpb.Principal
	var whenPermissions []*rbacpb.Permission
	for i, w := range r.GetWhen() {
		where := fmt.Sprintf("when[%d]", i)
		key := w.GetKey()
		a := whenAttr(key)
		switch {
		case w == nil:
			b.fail(where, "condition is null", true)
			continue
		case !utf8.ValidString(key):
			b.fail(where, "key is not UTF-8", true)
			continue
		case policy.CheckConditionKey(key) != "":
			// Package policy's rule, the webhook's too.
			b.fail(where, policy.CheckConditionKey(key), true)
			continue
		case a == nil:
			b.fail(where, fmt.Sprintf("unknown key %q", key), true)
			continue
		case b.t.opts.Flavor == GRPC:
			// grpcgen never translated conditions; gRPC could evaluate
			// a few, which stays for a change of its own.
			b.fail(where, key+" is not supported on proxyless gRPC", true)
			continue
		}
		c := cond{attr: a, key: key, when: true, where: where, valuesAt: where + ".values", notValuesAt: where + ".notValues",
			values: w.GetValues(), notValues: w.GetNotValues()}
		if a.permission != nil {
			whenPermissions = append(whenPermissions, compile(b, permissions, c)...)
		} else {
			whenPrincipals = append(whenPrincipals, compile(b, principals, c)...)
		}
	}
	pol := &rbacpb.Policy{}
	for i, f := range r.GetFrom() {
		ids := b.source(fmt.Sprintf("from[%d].source", i), f.GetSource())
		pol.Principals = append(pol.Principals, andPrincipals(append(ids, whenPrincipals...)))
	}
	if len(r.GetFrom()) == 0 {
		pol.Principals = []*rbacpb.Principal{andPrincipals(whenPrincipals)}
	}
	for i, t := range r.GetTo() {
		ops := b.operation(fmt.Sprintf("to[%d].operation", i), t.GetOperation())
		pol.Permissions = append(pol.Permissions, andPermissions(append(ops, whenPermissions...)))
	}
	if len(r.GetTo()) == 0 {
		pol.Permissions = []*rbacpb.Permission{andPermissions(whenPermissions)}
	}
	if b.dropped {
		return nil
	}
	return pol
}

// source returns the conditions of one from.source, in Istio's order.
func (b *ruleBuilder) source(where string, s *securityv1.Source) []*rbacpb.Principal {
	if s == nil {
		b.fail(where, "source is missing", true)
		return nil
	}
	sa := [][]string{s.GetServiceAccounts(), s.GetNotServiceAccounts()}
	if len(sa[0])+len(sa[1]) > 0 && len(s.GetPrincipals())+len(s.GetNotPrincipals())+len(s.GetNamespaces())+len(s.GetNotNamespaces()) > 0 {
		b.fail(where+".serviceAccounts", "serviceAccounts cannot be combined with principals or namespaces", true)
		sa = [][]string{nil, nil}
	}
	fields := []field{
		{attrPrincipal, "principals", s.GetPrincipals(), s.GetNotPrincipals()},
		{attrReqPrincipal, "requestPrincipals", s.GetRequestPrincipals(), s.GetNotRequestPrincipals()},
		{attrSA, "serviceAccounts", sa[0], sa[1]},
		{attrTD, "trustDomains", s.GetTrustDomains(), s.GetNotTrustDomains()},
		{attrNamespace, "namespaces", s.GetNamespaces(), s.GetNotNamespaces()},
		{attrRemoteIP, "remoteIpBlocks", s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks()},
		{attrSourceIP, "ipBlocks", s.GetIpBlocks(), s.GetNotIpBlocks()},
	}
	out := compileFields(b, principals, where, fields)
	if out == nil && !hasValues(fields) {
		b.fail(where, "source is empty", true)
	}
	return out
}

// operation returns the conditions of one to.operation, in Istio's order.
func (b *ruleBuilder) operation(where string, o *securityv1.Operation) []*rbacpb.Permission {
	if o == nil {
		b.fail(where, "operation is missing", true)
		return nil
	}
	fields := []field{
		{attrHost, "hosts", o.GetHosts(), o.GetNotHosts()},
		{attrMethod, "methods", o.GetMethods(), o.GetNotMethods()},
		{attrPath, "paths", o.GetPaths(), o.GetNotPaths()},
		{attrPort, "ports", o.GetPorts(), o.GetNotPorts()},
	}
	out := compileFields(b, permissions, where, fields)
	if out == nil && !hasValues(fields) {
		b.fail(where, "operation is empty", true)
	}
	return out
}

// field is a pair of fields of a source or an operation: "paths" and
// "notPaths".
type field struct {
	attr      *attr
	name      string
	values    []string
	notValues []string
}

func hasValues(fields []field) bool {
	for _, f := range fields {
		if len(f.values)+len(f.notValues) > 0 {
			return true
		}
	}
	return false
}

func compileFields[T any](b *ruleBuilder, s side[T], where string, fields []field) []T {
	var out []T
	for _, f := range fields {
		if len(f.values) > 0 {
			out = append(out, compile(b, s, fieldCond(f.attr, f.name, where+"."+f.name, f.values, false))...)
		}
		if len(f.notValues) > 0 {
			not := "not" + strings.ToUpper(f.name[:1]) + f.name[1:]
			out = append(out, compile(b, s, fieldCond(f.attr, not, where+"."+not, f.notValues, true))...)
		}
	}
	return out
}
