package authz

import (
	"fmt"
	"strings"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	securityv1 "istio.io/api/security/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// FuzzTranslate builds AuthorizationPolicies from the fuzzer's bytes and
// checks that the translation never panics, that every filter passes
// Envoy's validation (see rbacOf for the rest), that no rule of a DENY
// policy is lost, and that an ALLOW rule with a problem is left out.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 1, 1, 1, 3, 0, 2, 7, 2, 8, 9})
	f.Add([]byte{1, 1, 3, 2, 2, 2, 1, 2, 4, 3, 5, 6, 7, 2, 30, 2, 1, 40, 41})
	f.Add([]byte{2, 3, 1, 2, 201, 'x', 'y', 1, 1, 1, 2, 55, 56, 1, 0, 3, 4})
	f.Add([]byte("\x05\x01\x04\x01\x01\x01\x02\x03\x21\x22\x01\x0a\x02\x0b\x0c\x02\x30\x01\x31\x01\x32"))
	f.Fuzz(func(t *testing.T, data []byte) {
		policies := (&fuzzReader{b: data}).policies()
		for _, flavor := range []Flavor{Envoy, GRPC} {
			opts := Options{TrustDomain: td, Flavor: flavor}
			http := rbacOf(t, policies, opts, false)
			if flavor == Envoy {
				rbacOf(t, policies, opts, true)
			}
			problems := Check(policies, opts)
			for _, p := range problems {
				_ = p.String()
			}
			checkFailedClosed(t, policies, http, problems)
		}
	})
}

// checkFailedClosed checks that every rule of a DENY policy is in the
// filters and that no ALLOW rule with a problem is.
func checkFailedClosed(t *testing.T, policies []*model.AuthorizationPolicy, rules []*rbacpb.RBAC, problems []Problem) {
	t.Helper()
	deny, allow := map[string]bool{}, map[string]bool{}
	for _, r := range rules {
		for k := range r.GetPolicies() {
			switch r.GetAction() {
			case rbacpb.RBAC_DENY:
				deny[k] = true
			case rbacpb.RBAC_ALLOW:
				allow[k] = true
			}
		}
	}
	// Policies of one action whose names collide are renamed: skip them.
	count := map[string]int{}
	for _, p := range policies {
		count[p.Spec.GetAction().String()+policyName(p)]++
	}
	for _, p := range policies {
		name := policyName(p)
		if p.Spec.GetAction() != securityv1.AuthorizationPolicy_DENY || count["DENY"+name] > 1 {
			continue
		}
		for i := range max(1, len(p.Spec.GetRules())) {
			if !deny[fmt.Sprintf("%s-rule[%d]", name, i)] {
				t.Errorf("DENY rule %d of %s lost", i, name)
			}
		}
	}
	for _, p := range problems {
		if p.Effect != Dropped || p.Rule < 0 {
			continue
		}
		name := policyName(&model.AuthorizationPolicy{Meta: p.Policy})
		if count["ALLOW"+name] == 1 && allow[fmt.Sprintf("%s-rule[%d]", name, p.Rule)] {
			t.Errorf("ALLOW rule %d of %s kept despite %v", p.Rule, name, p)
		}
	}
}

// fuzzReader turns bytes into policies; past the end it reads zeros.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) n(mod int) int { return int(r.byte()) % mod }

// fuzzValues are values and keys that reach every branch of the
// translation; a byte of 200 or more reads raw bytes instead.
var fuzzValues = []string{
	"*", "", "a", "a*", "*a", "a*b", "**", "app", "app/a", "a/b/c", "/x", "ns/", "x*y*z",
	"cluster.local/ns/app/sa/a", "cluster.local/*", "*/sa/x", "clu*/ns/a/sa/b", "*local/ns/a/sa/b",
	"10.0.0.0/8", "10.0.0.1", "::1", "2001:db8::/32", "fe80::1%eth0", "300.1.1.1", "1.2.3.4/33",
	"8080", "0", "65535", "65536", "-1", "http",
	"/a", "/a/*", "*/a", "/a/{*}", "/{**}", "/{**}/{*}", "/a/{id}", "/a=b/{*}", "a/{*}", "/{*}/",
	"GET", "POST", ".*", "(a|b)", "[x]", "[", "\\", "\x00", "\xff", "a\nb", "example.org", "*.org", "e/x",
	"request.headers[x]", "request.headers[]", "request.headers[grpc-x]", "request.headers[:scheme]", "request.headersX",
	"source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount", "source.trustDomain",
	"destination.ip", "destination.port", "connection.sni", "experimental.envoy.filters.a[b]",
	"experimental.envoy.filters.a", "experimental.envoy.filters.a[]", "request.auth.claims[iss]",
	"request.auth.principal", "destination.namespace", "unknown",
	"request.auth.claims[a][b]", "request.auth.claims[kubernetes.io]", "request.auth.claims[]", "request.auth.claims[a[b]]",
	"request.auth.audiences", "request.auth.presenter", "https://idp.example/x/sub", "iss/*", "*/sub", "iss/",
	strings.Repeat("ab", 200), "/" + strings.Repeat("a/{*}/", 50),
}

func (r *fuzzReader) str() string {
	c := r.byte()
	if c < 200 {
		return fuzzValues[int(c)%len(fuzzValues)]
	}
	n := int(c - 200)
	if n > len(r.b) {
		n = len(r.b)
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *fuzzReader) strs() []string {
	var out []string
	for range r.n(4) {
		out = append(out, r.str())
	}
	return out
}

func (r *fuzzReader) policies() []*model.AuthorizationPolicy {
	actions := []securityv1.AuthorizationPolicy_Action{
		securityv1.AuthorizationPolicy_ALLOW, securityv1.AuthorizationPolicy_DENY, securityv1.AuthorizationPolicy_AUDIT,
		securityv1.AuthorizationPolicy_CUSTOM, securityv1.AuthorizationPolicy_ALLOW, 9,
	}
	var out []*model.AuthorizationPolicy
	for range 1 + r.n(4) {
		spec := &securityv1.AuthorizationPolicy{Action: actions[r.n(len(actions))]}
		for range r.n(4) {
			spec.Rules = append(spec.Rules, r.rule())
		}
		out = append(out, &model.AuthorizationPolicy{Meta: model.Meta{Namespace: "app", Name: r.str()}, Spec: spec})
	}
	return out
}

func (r *fuzzReader) rule() *securityv1.Rule {
	if r.n(32) == 0 {
		return nil
	}
	rule := &securityv1.Rule{}
	for range r.n(3) {
		from := &securityv1.Rule_From{}
		if r.n(16) != 0 {
			from.Source = r.source()
		}
		rule.From = append(rule.From, from)
	}
	for range r.n(3) {
		to := &securityv1.Rule_To{}
		if r.n(16) != 0 {
			to.Operation = r.operation()
		}
		rule.To = append(rule.To, to)
	}
	for range r.n(3) {
		rule.When = append(rule.When, &securityv1.Condition{Key: r.str(), Values: r.strs(), NotValues: r.strs()})
	}
	return rule
}

func (r *fuzzReader) source() *securityv1.Source {
	s := &securityv1.Source{}
	fields := []*[]string{
		&s.Principals, &s.NotPrincipals, &s.RequestPrincipals, &s.NotRequestPrincipals, &s.Namespaces, &s.NotNamespaces,
		&s.ServiceAccounts, &s.NotServiceAccounts, &s.IpBlocks, &s.NotIpBlocks, &s.RemoteIpBlocks, &s.NotRemoteIpBlocks,
		&s.TrustDomains, &s.NotTrustDomains,
	}
	for range r.n(4) {
		*fields[r.n(len(fields))] = r.strs()
	}
	return s
}

func (r *fuzzReader) operation() *securityv1.Operation {
	o := &securityv1.Operation{}
	fields := []*[]string{&o.Hosts, &o.NotHosts, &o.Ports, &o.NotPorts, &o.Methods, &o.NotMethods, &o.Paths, &o.NotPaths}
	for range r.n(4) {
		*fields[r.n(len(fields))] = r.strs()
	}
	return o
}

// FuzzClaimKey feeds arbitrary request.auth.claims keys to their parser:
// it refuses a key or returns at most 16 non-empty names without brackets
// that rebuild the key, and a policy using the key translates to filters
// Envoy accepts.
func FuzzClaimKey(f *testing.F) {
	for _, k := range []string{"request.auth.claims[iss]", "request.auth.claims[a][b]", "request.auth.claims[a.b]",
		"request.auth.claims[]", "request.auth.claims[a]x", "request.auth.claims[a[b]]", "request.auth.claims"} {
		f.Add(k, "v*")
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		path, err := claimPath(key)
		if err == nil {
			if len(path) == 0 || len(path) > maxClaimPathDepth {
				t.Fatalf("%q: %d names", key, len(path))
			}
			for _, p := range path {
				if p == "" || strings.ContainsAny(p, "[]") {
					t.Fatalf("%q: name %q", key, p)
				}
			}
			if rebuilt := "request.auth.claims[" + strings.Join(path, "][") + "]"; rebuilt != key {
				t.Fatalf("%q parsed as %q", key, path)
			}
		}
		spec := &securityv1.AuthorizationPolicy{Rules: []*securityv1.Rule{{When: []*securityv1.Condition{{Key: key, Values: []string{value}}}}}}
		rbacOf(t, []*model.AuthorizationPolicy{{Meta: model.Meta{Namespace: "app", Name: "p"}, Spec: spec}}, Options{TrustDomain: td, Flavor: Envoy}, false)
	})
}
