package authz

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbactcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	uritemplate "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	securityv1 "istio.io/api/security/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

// sp is the SPIFFE ID of a service account of the cluster.local trust domain.
func sp(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

// parse reads policy specs in YAML, all of namespace app: one spec is
// policy p, several are p0, p1, ...
func parse(t testing.TB, specs ...string) []*model.AuthorizationPolicy {
	t.Helper()
	var out []*model.AuthorizationPolicy
	for i, s := range specs {
		js, err := yaml.YAMLToJSON([]byte(s))
		if err != nil {
			t.Fatalf("policy %q: %v", s, err)
		}
		spec := &securityv1.AuthorizationPolicy{}
		if err := protojson.Unmarshal(js, spec); err != nil {
			t.Fatalf("policy %q: %v", s, err)
		}
		name := "p"
		if len(specs) > 1 {
			name = fmt.Sprintf("p%d", i)
		}
		out = append(out, &model.AuthorizationPolicy{Meta: model.Meta{Namespace: "app", Name: name}, Spec: spec})
	}
	return out
}

// rbacOf returns the RBAC rules of the filters for a chain, after checking
// what every output must satisfy: Envoy's validation, the filter names,
// order and stat prefix, deterministic bytes, regular expressions that
// quote all policy text, and for gRPC only matchers gRPC-Go accepts.
func rbacOf(t testing.TB, policies []*model.AuthorizationPolicy, opts Options, tcp bool) []*rbacpb.RBAC {
	t.Helper()
	var rules []*rbacpb.RBAC
	var names []string
	var raw [][]byte
	if tcp {
		filters, err := NetworkFilters(policies, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range filters {
			var r rbactcp.RBAC
			if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
				t.Fatal(err)
			}
			if err := r.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			if r.GetStatPrefix() != NetworkStatPrefix {
				t.Errorf("stat prefix %q", r.GetStatPrefix())
			}
			names, rules, raw = append(names, f.GetName()), append(rules, r.GetRules()), append(raw, f.GetTypedConfig().GetValue())
		}
	} else {
		filters, err := HTTPFilters(policies, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range filters {
			var r rbachttp.RBAC
			if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
				t.Fatal(err)
			}
			if err := r.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			names, rules, raw = append(names, f.GetName()), append(rules, r.GetRules()), append(raw, f.GetTypedConfig().GetValue())
		}
	}
	checkNamesAndOrder(t, opts.Flavor, tcp, names, rules)
	for _, r := range rules {
		if r == nil {
			t.Fatal("filter without rules: it would enforce nothing")
		}
		walk(t, r.ProtoReflect(), func(m proto.Message) { checkMessage(t, opts.Flavor, m) })
	}
	again := rbacOfBytes(t, policies, opts, tcp)
	for i := range raw {
		if string(raw[i]) != string(again[i]) {
			t.Fatal("the same policies marshal to different bytes")
		}
	}
	return rules
}

func rbacOfBytes(t testing.TB, policies []*model.AuthorizationPolicy, opts Options, tcp bool) [][]byte {
	var out [][]byte
	if tcp {
		fs, _ := NetworkFilters(policies, opts)
		for _, f := range fs {
			out = append(out, f.GetTypedConfig().GetValue())
		}
		return out
	}
	fs, _ := HTTPFilters(policies, opts)
	for _, f := range fs {
		out = append(out, f.GetTypedConfig().GetValue())
	}
	return out
}

// checkNamesAndOrder checks Istio's order (CUSTOM refusal, AUDIT, DENY,
// ALLOW), one filter per action, and the names.
func checkNamesAndOrder(t testing.TB, flavor Flavor, tcp bool, names []string, rules []*rbacpb.RBAC) {
	t.Helper()
	last := -1
	for i, r := range rules {
		rank := map[rbacpb.RBAC_Action]int{rbacpb.RBAC_LOG: 1, rbacpb.RBAC_DENY: 2, rbacpb.RBAC_ALLOW: 3}[r.GetAction()]
		if flavor == Envoy && r.GetAction() == rbacpb.RBAC_DENY && isCustomRefusal(r) {
			rank = 0
		}
		if rank <= last {
			t.Errorf("filters out of order: %v", rules)
		}
		last = rank
		want := HTTPFilterName
		switch {
		case tcp:
			want = NetworkFilterName
		case flavor == GRPC && r.GetAction() == rbacpb.RBAC_DENY:
			want = HTTPDenyFilterName
		}
		if names[i] != want {
			t.Errorf("filter %d (%s) named %q, want %q", i, r.GetAction(), names[i], want)
		}
		if flavor == GRPC && r.GetAction() == rbacpb.RBAC_LOG {
			t.Error("gRPC ignores LOG filters")
		}
	}
}

func isCustomRefusal(r *rbacpb.RBAC) bool {
	for name := range r.GetPolicies() {
		if !strings.Contains(name, "-deny-due-to-bad-CUSTOM-action") { // a renamed collision ends in #n
			return false
		}
	}
	return len(r.GetPolicies()) > 0
}

// walk calls f on every message under m, unpacking the path templates.
func walk(t testing.TB, m protoreflect.Message, f func(proto.Message)) {
	f(m.Interface())
	if p, ok := m.Interface().(*rbacpb.Permission); ok && p.GetUriTemplate() != nil {
		var cfg uritemplate.UriTemplateMatchConfig
		if err := p.GetUriTemplate().GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Fatal(err)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(t, mv.Message(), f)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len(); i++ {
					walk(t, v.List().Get(i).Message(), f)
				}
			}
		case fd.Message() != nil:
			walk(t, v.Message(), f)
		}
		return true
	})
}

// checkMessage checks one message of the output: regular expressions
// quote all policy text, and gRPC gets only what gRPC-Go evaluates.
func checkMessage(t testing.TB, flavor Flavor, m proto.Message) {
	t.Helper()
	switch m := m.(type) {
	case *matcher.RegexMatcher:
		if _, err := regexp.Compile(m.GetRegex()); err != nil {
			t.Errorf("regex %q: %v", m.GetRegex(), err)
		}
		if rest := unquoted(m.GetRegex()); strings.ContainsAny(rest, `\.+*?()|[]{}^$`) {
			t.Errorf("regex %q has syntax that is not ours: %q", m.GetRegex(), rest)
		}
	case *rbacpb.Permission:
		if flavor == GRPC && (m.GetUriTemplate() != nil || m.GetMetadata() != nil || m.GetRequestedServerName() != nil) {
			t.Errorf("gRPC cannot evaluate %v", m)
		}
	case *rbacpb.Principal:
		if flavor == GRPC && (m.GetMetadata() != nil || m.GetHeader() != nil || m.GetRemoteIp() != nil) {
			t.Errorf("grpcgen never supported %v", m)
		}
	case *route.HeaderMatcher:
		name := strings.ToLower(m.GetName())
		if flavor == GRPC && name != ":method" {
			t.Errorf("gRPC header matcher on %q", name)
		}
	}
}

// unquoted removes from a regular expression the quoted characters and
// the fragments this package writes; what remains must be plain text.
func unquoted(re string) string {
	var b strings.Builder
	for i := 0; i < len(re); i++ {
		if re[i] == '\\' && i+1 < len(re) {
			i++
			b.WriteByte('x')
			continue
		}
		b.WriteByte(re[i])
	}
	s := b.String()
	for _, f := range []fragment{optionalPath, optionalTail, segmentText, anyText, someText} {
		s = strings.ReplaceAll(s, string(f), "")
	}
	return s
}

// check is what a data plane must decide for some requests.
type check struct {
	allow, deny []req
}

// testCase is a set of policies and what each data plane must decide.
// A nil check leaves that data plane out.
type testCase struct {
	specs []string
	td    string // trust domain, cluster.local if empty
	envoy *check // Envoy, HTTP chain
	tcp   *check // Envoy, TCP chain
	grpc  *check
	// The problems Check reports, each by a part of its text, in order.
	problems, grpcProblems []string
}

// both is the same check for Envoy and gRPC.
func (tc testCase) both(c *check) testCase {
	tc.envoy, tc.grpc = c, c
	return tc
}

func run(t *testing.T, cases map[string]testCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			policies := parse(t, tc.specs...)
			trust := td
			if tc.td != "" {
				trust = spiffeid.RequireTrustDomainFromString(tc.td)
			}
			for _, dp := range []struct {
				label    string
				flavor   Flavor
				tcp      bool
				c        *check
				problems []string
			}{
				{"Envoy HTTP", Envoy, false, tc.envoy, tc.problems},
				{"Envoy TCP", Envoy, true, tc.tcp, tc.problems},
				{"gRPC", GRPC, false, tc.grpc, tc.grpcProblems},
			} {
				if dp.c == nil {
					continue
				}
				opts := Options{TrustDomain: trust, Flavor: dp.flavor}
				rules := rbacOf(t, policies, opts, dp.tcp)
				for _, r := range dp.c.allow {
					if !allowed(t, dp.flavor, dp.tcp, rules, r) {
						t.Errorf("%s denies %+v, want allowed; rules %v", dp.label, r, rules)
					}
				}
				for _, r := range dp.c.deny {
					if allowed(t, dp.flavor, dp.tcp, rules, r) {
						t.Errorf("%s allows %+v, want denied; rules %v", dp.label, r, rules)
					}
				}
				checkProblems(t, dp.label, Check(policies, opts), dp.problems)
			}
		})
	}
}

func checkProblems(t *testing.T, label string, got []Problem, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i].String(), want[i])
	}
	if !ok {
		t.Errorf("%s problems:\n%v\nwant (parts of) %q", label, got, want)
	}
}
