package authz

import (
	"fmt"
	"strconv"
	"strings"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	securityv1 "istio.io/api/security/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// translator translates the policies of one workload for one kind of chain.
type translator struct {
	opts     Options
	forTCP   bool
	problems []Problem
	// The RBAC configurations by action, nil while no policy has it.
	custom, audit, deny, allow *rbacpb.RBAC
}

func translate(policies []*model.AuthorizationPolicy, opts Options, forTCP bool) *translator {
	t := &translator{opts: opts, forTCP: forTCP}
	for _, p := range policies {
		if p != nil {
			t.policy(p)
		}
	}
	return t
}

func (t *translator) policy(p *model.AuthorizationPolicy) {
	action := p.Spec.GetAction()
	switch action {
	case securityv1.AuthorizationPolicy_ALLOW:
		t.allow = t.rules(t.allow, rbacpb.RBAC_ALLOW, p)
	case securityv1.AuthorizationPolicy_DENY:
		if len(p.Spec.GetRules()) == 0 {
			t.problem(p, "DENY without rules never matches (add an empty rule {} to deny everything)", Ignored)
		}
		t.deny = t.rules(t.deny, rbacpb.RBAC_DENY, p)
	case securityv1.AuthorizationPolicy_AUDIT:
		if t.opts.Flavor == GRPC {
			t.problem(p, "gRPC has no audit", Ignored)
			return
		}
		t.audit = t.rules(t.audit, rbacpb.RBAC_LOG, p)
	default:
		reason := "CUSTOM (external authorization) is not supported"
		if action != securityv1.AuthorizationPolicy_CUSTOM {
			reason = fmt.Sprintf("unknown action %d", int32(action))
		}
		t.problem(p, reason, DeniesAll)
		// gRPC refuses a second filter of one name: its refusal joins DENY.
		into := &t.custom
		if t.opts.Flavor == GRPC {
			into = &t.deny
		}
		*into = ensure(*into, rbacpb.RBAC_DENY)
		add(*into, "istio-ext-authz-"+policyName(p)+"-deny-due-to-bad-CUSTOM-action", matchAlways())
	}
}

// rules adds the policy's rules to r (created when nil) and returns it. A
// policy without rules matches nothing, as Istio writes it.
func (t *translator) rules(r *rbacpb.RBAC, action rbacpb.RBAC_Action, p *model.AuthorizationPolicy) *rbacpb.RBAC {
	r = ensure(r, action)
	rules := p.Spec.GetRules()
	if len(rules) == 0 {
		add(r, policyName(p)+"-rule[0]", matchNever())
		return r
	}
	for i, rule := range rules {
		b := &ruleBuilder{t: t, policy: p, index: i, action: p.Spec.GetAction()}
		if pol := b.build(rule); pol != nil {
			add(r, policyName(p)+"-rule["+strconv.Itoa(i)+"]", pol)
		}
	}
	return r
}

func (t *translator) problem(p *model.AuthorizationPolicy, reason string, e Effect) {
	t.problems = append(t.problems, Problem{Policy: p.Meta, Rule: -1, Reason: reason, Effect: e})
}

func ensure(r *rbacpb.RBAC, action rbacpb.RBAC_Action) *rbacpb.RBAC {
	if r == nil {
		r = &rbacpb.RBAC{Action: action, Policies: map[string]*rbacpb.Policy{}}
	}
	return r
}

// add adds a policy under name, which must not replace another one: names
// built from odd policy names could collide.
func add(r *rbacpb.RBAC, name string, p *rbacpb.Policy) {
	key := name
	for n := 2; r.Policies[key] != nil; n++ {
		key = name + "#" + strconv.Itoa(n)
	}
	r.Policies[key] = p
}

// policyName is Istio's "ns[<namespace>]-policy[<name>]".
func policyName(p *model.AuthorizationPolicy) string {
	return "ns[" + strings.ToValidUTF8(p.Namespace, "\uFFFD") + "]-policy[" + strings.ToValidUTF8(p.Name, "\uFFFD") + "]"
}
