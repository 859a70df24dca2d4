package model_test

import (
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

const reachRule = `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: app}
spec:
  host: web
  trafficPolicy: {tls: {mode: DISABLE}}
`

// TestDiffTellsDestinationRules: a DestinationRule added, changed or
// removed is told by name (a changed one before and after), and is not a
// config change.
func TestDiffTellsDestinationRules(t *testing.T) {
	base := modeltest.Load(t, diffBase+reachRule)
	for name, tc := range map[string]struct {
		next string
		want int
	}{
		"a rule changed": {strings.Replace(diffBase+reachRule, "DISABLE", "ISTIO_MUTUAL", 1), 2},
		"a rule removed": {diffBase, 1},
		"a rule added":   {diffBase + reachRule + strings.Replace(reachRule, "name: web,", "name: web2,", 1), 1},
	} {
		t.Run(name, func(t *testing.T) {
			d := model.Diff(base, modeltest.Load(t, tc.next))
			if d.Config || len(d.DestinationRules) != tc.want || d.None() {
				t.Errorf("config %t, %d rules told, want %d: %+v", d.Config, len(d.DestinationRules), tc.want, d)
			}
		})
	}
}

// TestDestinationRuleAudience: who a rule may apply to, from its exportTo,
// the mesh's default, its workloadSelector and the rules it merges with.
func TestDestinationRuleAudience(t *testing.T) {
	rule := func(name, extra string) string {
		return "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: app}\nspec:\n  host: web" + extra + "\n"
	}
	for name, tc := range map[string]struct {
		rules      string
		opts       model.Options
		reaches    []string
		reachesNot []string
	}{
		"no exportTo: every namespace":             {rules: rule("r", ""), reaches: []string{"app", "other"}},
		"no exportTo under a private mesh default": {rules: rule("r", ""), opts: model.Options{DefaultDestinationRuleExportTo: "."}, reaches: []string{"app"}, reachesNot: []string{"other"}},
		"private":                   {rules: rule("r", "\n  exportTo: [\".\"]"), reaches: []string{"app"}, reachesNot: []string{"other"}},
		"to a namespace by name":    {rules: rule("r", "\n  exportTo: [b]"), reaches: []string{"app", "b"}, reachesNot: []string{"other"}},
		"none":                      {rules: rule("r", "\n  exportTo: [\"~\"]"), reaches: []string{"app"}, reachesNot: []string{"other"}},
		"a workload selector stays": {rules: rule("r", "\n  workloadSelector: {matchLabels: {app: x}}"), reaches: []string{"app"}, reachesNot: []string{"other"}},
		"merged with an exported rule for the host": {
			rules: rule("r", "\n  exportTo: [\".\"]") + rule("s", "\n  exportTo: [b]"), reaches: []string{"app", "b"}, reachesNot: []string{"other"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, diffBase+tc.rules)
			snap = model.Build("audience", tc.opts, *snap.Resources())
			var dr *model.DestinationRule
			for _, r := range snap.Resources().DestinationRules {
				if r.Name == "r" {
					dr = r
				}
			}
			a := snap.DestinationRuleAudience(dr)
			for _, ns := range tc.reaches {
				if !a.Reaches(ns) {
					t.Errorf("does not reach %s", ns)
				}
			}
			for _, ns := range tc.reachesNot {
				if a.Reaches(ns) {
					t.Errorf("reaches %s", ns)
				}
			}
		})
	}
}
