package model

import (
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	networkingalpha "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// rule is a DestinationRule ns/name for host, created at second created,
// with exportTo, a selector (nil for none), a TLS mode ("" for none) and
// subsets.
type rule struct {
	ns, name, host string
	created        int
	exportTo       []string
	selector       map[string]string
	tls            string
	subsets        []string
}

func (r rule) build() *DestinationRule {
	spec := &networkingv1.DestinationRule{Host: r.host, ExportTo: r.exportTo}
	if r.selector != nil {
		spec.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: r.selector}
	}
	if r.tls != "" {
		spec.TrafficPolicy = &networkingv1.TrafficPolicy{Tls: &networkingv1.ClientTLSSettings{
			Mode: networkingv1.ClientTLSSettings_TLSmode(networkingalpha.ClientTLSSettings_TLSmode_value[r.tls]),
		}}
	}
	for _, s := range r.subsets {
		name, label, _ := strings.Cut(s, "=")
		spec.Subsets = append(spec.Subsets, &networkingv1.Subset{Name: name, Labels: map[string]string{"version": label}})
	}
	return &DestinationRule{Meta: Meta{Name: r.name, Namespace: r.ns}, Created: time.Unix(int64(r.created), 0), Spec: spec}
}

// ruleWorld is services app/echo, other/backend and partner/api, with
// rules.
func ruleWorld(rules ...rule) *Snapshot {
	res := Resources{Services: []*Service{
		{Meta: Meta{Name: "echo", Namespace: "app"}},
		{Meta: Meta{Name: "backend", Namespace: "other"}},
		{Meta: Meta{Name: "api", Namespace: "partner"}},
	}}
	for _, r := range rules {
		res.DestinationRules = append(res.DestinationRules, r.build())
	}
	return Build("v", Options{}, res)
}

const (
	echoHost    = "echo.app.svc.cluster.local"
	backendHost = "backend.other.svc.cluster.local"
	apiHost     = "api.partner.svc.cluster.local"
)

// chosen describes the rule DestinationRuleFor chooses: its sources, its
// TLS mode and its subsets; "-" for none.
func chosen(s *Snapshot, host, ns string, labels map[string]string) string {
	r := s.DestinationRuleFor(host, ns, labels)
	if r == nil {
		return "-"
	}
	var subsets []string
	for _, ss := range r.Spec.GetSubsets() {
		subsets = append(subsets, ss.GetName()+"="+ss.GetLabels()["version"])
	}
	out := strings.TrimSuffix(r.Key(), ";")
	if tls := r.Spec.GetTrafficPolicy().GetTls(); tls != nil {
		out += " " + tls.GetMode().String()
	}
	if len(subsets) > 0 {
		out += " [" + strings.Join(subsets, " ") + "]"
	}
	return out
}

func TestDestinationRuleForChoosesAsIstio(t *testing.T) {
	sleep := map[string]string{"app": "sleep"}
	canary := map[string]string{"app": "sleep", "version": "v2"}
	type check struct {
		host, ns string
		labels   map[string]string
		want     string
	}
	for name, tc := range map[string]struct {
		rules  []rule
		mesh   []string // defaultDestinationRuleExportTo
		checks []check
	}{
		"a rule of the service's namespace applies to every namespace": {
			rules:  []rule{{ns: "app", name: "echo", host: "echo", tls: "DISABLE"}},
			checks: []check{{echoHost, "app", sleep, "app/echo DISABLE"}, {echoHost, "other", nil, "app/echo DISABLE"}, {backendHost, "app", nil, "-"}},
		},
		"a rule exported to its own namespace stays there": {
			rules:  []rule{{ns: "app", name: "echo", host: echoHost, exportTo: []string{"."}, tls: "DISABLE"}},
			checks: []check{{echoHost, "app", sleep, "app/echo DISABLE"}, {echoHost, "other", nil, "-"}, {echoHost, "istio-system", nil, "-"}},
		},
		"a rule exported to its namespace by name stays there": {
			rules:  []rule{{ns: "app", name: "echo", host: "echo", exportTo: []string{"app"}, tls: "DISABLE"}},
			checks: []check{{echoHost, "app", nil, "app/echo DISABLE"}, {echoHost, "other", nil, "-"}},
		},
		"a rule exported to a namespace by name reaches it and not its own": {
			rules:  []rule{{ns: "app", name: "echo", host: "echo", exportTo: []string{"other"}, tls: "DISABLE"}},
			checks: []check{{echoHost, "other", nil, "app/echo DISABLE"}, {echoHost, "app", nil, "-"}, {echoHost, "partner", nil, "-"}},
		},
		"a rule exported to no namespace applies nowhere": {
			rules:  []rule{{ns: "app", name: "echo", host: "echo", exportTo: []string{"~"}, tls: "DISABLE"}},
			checks: []check{{echoHost, "app", nil, "-"}, {echoHost, "other", nil, "-"}},
		},
		"a rule exported to another namespace that is neither the service's nor the root's does not reach it": {
			rules:  []rule{{ns: "app", name: "backend", host: backendHost, exportTo: []string{"partner"}, tls: "DISABLE"}},
			checks: []check{{backendHost, "partner", nil, "-"}, {backendHost, "app", nil, "-"}},
		},
		"a root namespace wildcard rule for a namespace's hosts": {
			rules:  []rule{{ns: "istio-system", name: "partner", host: "*.partner.svc.cluster.local", tls: "DISABLE"}},
			checks: []check{{apiHost, "app", nil, "istio-system/partner DISABLE"}, {apiHost, "partner", nil, "istio-system/partner DISABLE"}, {echoHost, "app", nil, "-"}},
		},
		"the most specific host of a namespace wins": {
			rules: []rule{
				{ns: "istio-system", name: "all", host: "*", tls: "ISTIO_MUTUAL"},
				{ns: "istio-system", name: "local", host: "*.local", tls: "DISABLE"},
				{ns: "istio-system", name: "app", host: "*.app.svc.cluster.local", tls: "SIMPLE"},
				{ns: "istio-system", name: "echo", host: echoHost, tls: "MUTUAL"},
			},
			checks: []check{{echoHost, "x", nil, "istio-system/echo MUTUAL"}, {backendHost, "x", nil, "istio-system/local DISABLE"}},
		},
		"the client's namespace, then the service's, then the root's": {
			rules: []rule{
				{ns: "other", name: "mine", host: "*", tls: "DISABLE"},
				{ns: "app", name: "echo", host: "echo", tls: "ISTIO_MUTUAL"},
				{ns: "istio-system", name: "all", host: echoHost, tls: "SIMPLE"},
			},
			checks: []check{{echoHost, "other", nil, "other/mine DISABLE"}, {echoHost, "partner", nil, "app/echo ISTIO_MUTUAL"}, {apiHost, "partner", nil, "-"}},
		},
		"a more specific rule not exported to the client hides its namespace's wildcard": {
			rules: []rule{
				{ns: "app", name: "echo", host: "echo", exportTo: []string{"partner"}, tls: "DISABLE"},
				{ns: "app", name: "wide", host: "*.app.svc.cluster.local", tls: "SIMPLE"},
				{ns: "istio-system", name: "all", host: "*", tls: "MUTUAL"},
			},
			checks: []check{{echoHost, "other", nil, "istio-system/all MUTUAL"}, {echoHost, "partner", nil, "app/echo DISABLE"}},
		},
		"the root namespace's clients look at its private rules first": {
			rules: []rule{
				{ns: "istio-system", name: "private", host: "*", exportTo: []string{"."}, tls: "DISABLE"},
				{ns: "istio-system", name: "public", host: echoHost, tls: "SIMPLE"},
				{ns: "app", name: "echo", host: "echo", tls: "ISTIO_MUTUAL"},
			},
			checks: []check{{echoHost, "istio-system", nil, "istio-system/private DISABLE"}, {echoHost, "other", nil, "app/echo ISTIO_MUTUAL"}},
		},
		"a public root rule does not come before the service's for the root's clients": {
			rules: []rule{
				{ns: "istio-system", name: "public", host: "*", tls: "SIMPLE"},
				{ns: "app", name: "echo", host: "echo", tls: "ISTIO_MUTUAL"},
			},
			checks: []check{{echoHost, "istio-system", nil, "app/echo ISTIO_MUTUAL"}, {backendHost, "istio-system", nil, "istio-system/public SIMPLE"}},
		},
		"rules for one host merge: the oldest traffic policy, new subsets added": {
			rules: []rule{
				{ns: "app", name: "b", host: "echo", created: 2, tls: "DISABLE", subsets: []string{"v1=2", "v2=2"}},
				{ns: "app", name: "a", host: echoHost, created: 1, tls: "ISTIO_MUTUAL", subsets: []string{"v1=1"}},
				{ns: "app", name: "c", host: "echo", created: 3, subsets: []string{"v3=3"}},
			},
			checks: []check{{echoHost, "other", nil, "app/a;app/b;app/c ISTIO_MUTUAL [v1=1 v2=2 v3=3]"}},
		},
		"a merged rule takes the first traffic policy it meets": {
			rules: []rule{
				{ns: "app", name: "a", host: "echo", created: 1, subsets: []string{"v1=1"}},
				{ns: "app", name: "b", host: "echo", created: 2, tls: "DISABLE"},
			},
			checks: []check{{echoHost, "app", nil, "app/a;app/b DISABLE [v1=1]"}},
		},
		"rules with different exportTo stay apart and the last applies": {
			rules: []rule{
				{ns: "app", name: "a", host: "echo", created: 1, tls: "ISTIO_MUTUAL"},
				{ns: "app", name: "b", host: "echo", created: 2, exportTo: []string{"*"}, tls: "DISABLE"},
			},
			checks: []check{{echoHost, "other", nil, "app/b DISABLE"}, {echoHost, "app", nil, "app/b DISABLE"}},
		},
		"a rule whose exportTo holds the other's merges into it and stays apart": {
			rules: []rule{
				{ns: "app", name: "a", host: "echo", created: 1, exportTo: []string{"other"}, subsets: []string{"v1=1"}},
				{ns: "app", name: "b", host: "echo", created: 2, exportTo: []string{"other", "partner"}, tls: "DISABLE"},
			},
			// b merged into a (same selector: none) is not kept apart.
			checks: []check{{echoHost, "other", nil, "app/a;app/b DISABLE [v1=1]"}, {echoHost, "partner", nil, "-"}},
		},
		"a workload-selected rule wins for its namespace's matching clients only": {
			rules: []rule{
				{ns: "app", name: "canary", host: "echo", created: 2, selector: map[string]string{"version": "v2"}, tls: "DISABLE"},
				{ns: "app", name: "echo", host: "echo", created: 1, tls: "ISTIO_MUTUAL"},
			},
			checks: []check{
				{echoHost, "app", canary, "app/canary DISABLE"}, {echoHost, "app", sleep, "app/echo ISTIO_MUTUAL"},
				{echoHost, "other", canary, "app/echo ISTIO_MUTUAL"},
			},
		},
		"a namespace whose only rule selects others leaves the rest without one": {
			rules: []rule{
				{ns: "app", name: "canary", host: backendHost, selector: map[string]string{"version": "v2"}, tls: "DISABLE"},
				{ns: "other", name: "backend", host: "backend", tls: "SIMPLE"},
			},
			checks: []check{{backendHost, "app", canary, "app/canary DISABLE"}, {backendHost, "app", sleep, "-"}, {backendHost, "partner", nil, "other/backend SIMPLE"}},
		},
		"workload-selected rules merge when their selectors are equal": {
			rules: []rule{
				{ns: "app", name: "s1", host: "echo", created: 1, selector: sleep, subsets: []string{"a=1"}},
				{ns: "app", name: "s2", host: "echo", created: 2, selector: sleep, tls: "DISABLE", subsets: []string{"b=2"}},
				{ns: "app", name: "s3", host: "echo", created: 3, selector: map[string]string{"version": "v2"}, tls: "SIMPLE"},
			},
			checks: []check{{echoHost, "app", sleep, "app/s1;app/s2 DISABLE [a=1 b=2]"}, {echoHost, "app", map[string]string{"version": "v2"}, "app/s3 SIMPLE"}},
		},
		"a rule exported to its own namespace merges into a selected one, as in Istio": {
			rules: []rule{
				{ns: "app", name: "selected", host: "echo", created: 1, selector: canary, subsets: []string{"a=1"}},
				{ns: "app", name: "private", host: "echo", created: 2, exportTo: []string{"."}, tls: "DISABLE"},
			},
			checks: []check{{echoHost, "app", canary, "app/selected;app/private DISABLE [a=1]"}, {echoHost, "app", sleep, "-"}},
		},
		"a workload-selected rule of the root namespace is for the root's workloads": {
			rules: []rule{
				{ns: "istio-system", name: "ops", host: "*", selector: map[string]string{"app": "ops"}, tls: "DISABLE"},
				{ns: "istio-system", name: "all", host: "*.local", created: 1, tls: "SIMPLE"},
			},
			checks: []check{{echoHost, "istio-system", map[string]string{"app": "ops"}, "istio-system/ops DISABLE"}, {echoHost, "app", map[string]string{"app": "ops"}, "istio-system/all SIMPLE"}},
		},
		"mesh defaultDestinationRuleExportTo '.' keeps rules without exportTo home": {
			mesh: []string{"."},
			rules: []rule{
				{ns: "app", name: "echo", host: "echo", tls: "DISABLE"},
				{ns: "partner", name: "api", host: "api", exportTo: []string{"*"}, tls: "SIMPLE"},
			},
			checks: []check{{echoHost, "app", nil, "app/echo DISABLE"}, {echoHost, "other", nil, "-"}, {apiHost, "other", nil, "partner/api SIMPLE"}},
		},
		"mesh defaultDestinationRuleExportTo naming a namespace exports everywhere, as in Istio": {
			mesh:   []string{"other"},
			rules:  []rule{{ns: "app", name: "echo", host: "echo", tls: "DISABLE"}},
			checks: []check{{echoHost, "partner", nil, "app/echo DISABLE"}},
		},
		"a host that is an address or '*' is not a short name": {
			rules:  []rule{{ns: "app", name: "ip", host: "10.0.0.1", tls: "SIMPLE"}, {ns: "app", name: "all", host: "*", tls: "DISABLE"}},
			checks: []check{{apiHost, "app", nil, "app/all DISABLE"}, {"10.0.0.1", "app", nil, "-"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := ruleWorld(tc.rules...).WithExportDefaults(nil, tc.mesh)
			for _, c := range tc.checks {
				if got := chosen(s, c.host, c.ns, c.labels); got != c.want {
					t.Errorf("%s from %s %v: %q, want %q", c.host, c.ns, c.labels, got, c.want)
				}
			}
		})
	}
}

func TestMergedRulesLeaveTheSnapshotsRulesAsWritten(t *testing.T) {
	s := ruleWorld(
		rule{ns: "app", name: "a", host: "echo", created: 1, subsets: []string{"v1=1"}},
		rule{ns: "app", name: "b", host: "echo", created: 2, tls: "DISABLE", subsets: []string{"v2=2"}},
	)
	if got := chosen(s, echoHost, "app", nil); got != "app/a;app/b DISABLE [v1=1 v2=2]" {
		t.Fatalf("merged %q", got)
	}
	for _, dr := range s.Resources().DestinationRules {
		if len(dr.Spec.GetSubsets()) != 1 || dr.From != nil || (dr.Name == "a" && dr.Spec.GetTrafficPolicy() != nil) {
			t.Errorf("rule %s changed: %v", dr.Name, dr.Spec)
		}
	}
}

func TestDestinationRulesOfIncludesWildcards(t *testing.T) {
	s := ruleWorld(
		rule{ns: "app", name: "echo", host: "echo"},
		rule{ns: "istio-system", name: "app", host: "*.app.svc.cluster.local"},
		rule{ns: "istio-system", name: "all", host: "*"},
		rule{ns: "istio-system", name: "partner", host: "*.partner.svc.cluster.local"},
	)
	var got []string
	for _, dr := range s.DestinationRulesOf(echoHost) {
		got = append(got, dr.Name)
	}
	slices.Sort(got)
	if want := []string{"all", "app", "echo"}; !slices.Equal(got, want) {
		t.Errorf("rules of echo %v, want %v", got, want)
	}
}

func TestServiceVisibility(t *testing.T) {
	svc := func(ns string, exportTo ...string) *Service {
		return &Service{Meta: Meta{Name: "s", Namespace: ns}, ExportTo: exportTo}
	}
	for name, tc := range map[string]struct {
		svc     *Service
		mesh    []string
		visible map[string]bool
	}{
		"without exportTo, everywhere":   {svc("a"), nil, map[string]bool{"a": true, "b": true}},
		"'.' is its own namespace":       {svc("a", "."), nil, map[string]bool{"a": true, "b": false}},
		"a name is that namespace":       {svc("a", "b"), nil, map[string]bool{"a": false, "b": true, "c": false}},
		"'~' is none":                    {svc("a", "~"), nil, map[string]bool{"a": false, "b": false}},
		"'~' with names is none":         {svc("a", "~", "b"), nil, map[string]bool{"a": false, "b": false}},
		"'*' wins over '~'":              {svc("a", "~", "*"), nil, map[string]bool{"a": true, "b": true}},
		"the mesh default applies":       {svc("a"), []string{"."}, map[string]bool{"a": true, "b": false}},
		"the annotation wins over it":    {svc("a", "*"), []string{"."}, map[string]bool{"b": true}},
		"a mesh default naming some":     {svc("a"), []string{"b", "c"}, map[string]bool{"a": false, "b": true, "c": true}},
		"a mesh default of none":         {svc("a"), []string{"~"}, map[string]bool{"a": false, "b": false}},
		"'.' and another namespace":      {svc("a", ".", "c"), nil, map[string]bool{"a": true, "b": false, "c": true}},
		"own namespace named is private": {svc("a", "a"), nil, map[string]bool{"a": true, "b": false}},
	} {
		t.Run(name, func(t *testing.T) {
			s := Build("v", Options{}, Resources{Services: []*Service{tc.svc}}).WithExportDefaults(tc.mesh, nil)
			for ns, want := range tc.visible {
				if got := s.ServiceVisible(tc.svc, ns); got != want {
					t.Errorf("visible to %s: %t, want %t", ns, got, want)
				}
				if got := len(s.ServicesVisibleTo(ns)) == 1; got != want {
					t.Errorf("ServicesVisibleTo(%s) holds it: %t, want %t", ns, got, want)
				}
				if got := s.VisibleService(tc.svc.Hostname, ns) != nil; got != want {
					t.Errorf("VisibleService from %s: %t, want %t", ns, got, want)
				}
			}
		})
	}
}

func TestParseExportTo(t *testing.T) {
	for in, want := range map[string][]string{
		"":          nil,
		".":         {"."},
		"a, b ,c":   {"a", "b", "c"},
		"~":         {"~"},
		"a,":        {"a", ""},
		" * , app ": {"*", "app"},
	} {
		if got := ParseExportTo(in); !slices.Equal(got, want) {
			t.Errorf("ParseExportTo(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ParseExportTo(strings.Repeat("a,", 1000)); len(got) != maxExportTo {
		t.Errorf("%d entries read, want the limit %d", len(got), maxExportTo)
	}
}

func TestWithExportDefaults(t *testing.T) {
	s := ruleWorld(rule{ns: "app", name: "echo", host: "echo", tls: "DISABLE"})
	if s.WithExportDefaults(nil, nil) != s {
		t.Error("Istio's defaults made a copy")
	}
	private := s.WithExportDefaults(nil, []string{"."})
	if private == s || private.Version == s.Version || private.Options.DefaultDestinationRuleExportTo != "." {
		t.Fatalf("copy %+v", private.Options)
	}
	if chosen(private, echoHost, "other", nil) != "-" || chosen(s, echoHost, "other", nil) != "app/echo DISABLE" {
		t.Error("the copy and the original share a rule index")
	}
	if private.WithExportDefaults(nil, []string{"."}) != private {
		t.Error("the same defaults made another copy")
	}
	if Diff(s, private).Config != true {
		t.Error("Diff does not see the export defaults change")
	}
}

func TestDiffSeesServiceExportTo(t *testing.T) {
	build := func(exportTo ...string) *Snapshot {
		return Build("", Options{}, Resources{Services: []*Service{{Meta: Meta{Name: "s", Namespace: "a"}, ExportTo: exportTo}}})
	}
	c := Diff(build(), build("."))
	if !c.Services["s.a.svc.cluster.local"] {
		t.Errorf("an exportTo change is not a service change: %+v", c)
	}
}

func TestDestinationRuleCreationTimeIsPartOfItsIdentity(t *testing.T) {
	a := rule{ns: "app", name: "a", host: "echo", created: 1}.build()
	b := rule{ns: "app", name: "a", host: "echo", created: 2}.build()
	am, _ := a.Parts()
	bm, _ := b.Parts()
	if am == bm {
		t.Error("rules created at different times have equal parts")
	}
}
