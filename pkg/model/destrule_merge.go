package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// merge adds dr, for host, to h as Istio merges a rule into the rules of
// its namespace for the same host (written the same way, wildcard or
// not). dr merges into each existing rule whose exportTo is the same, or
// a subset of dr's when not empty, and whose workloadSelector is the same
// (or of which one has none); merging adds dr's subsets whose names the
// merged rule lacks, and dr's traffic policy if it has none. dr is kept
// apart as well unless the last rule it was compared with had the same
// selector or neither had one (or, with one of them selected, the same
// exportTo). This is Istio's merge with its default
// ENABLE_ENHANCED_DESTINATIONRULE_MERGE=true; the rules Istio synthesizes
// from Gateway API backend policies do not arise here.
func (h *hostRules) merge(host string, dr *DestinationRule, exportTo []string) {
	m := h.exact
	if strings.HasPrefix(host, "*") {
		m = h.wildcard
	}
	list, ok := m[host]
	if !ok {
		m[host] = []*mergedRule{{rule: dr, exportTo: exportTo}}
		return
	}
	separate := true
	for _, mr := range list {
		switch {
		case slices.Equal(exportTo, mr.exportTo):
			separate = false
		case len(mr.exportTo) > 0 && subset(mr.exportTo, exportTo):
			separate = true
		default:
			separate = true
			continue
		}
		oldSel, newSel := mr.rule.Spec.GetWorkloadSelector(), dr.Spec.GetWorkloadSelector()
		bothWith, bothWithout := oldSel != nil && newSel != nil, oldSel == nil && newSel == nil
		sameSelector := maps.Equal(oldSel.GetMatchLabels(), newSel.GetMatchLabels())
		if bothWith && !sameSelector {
			separate = true
			continue
		}
		if bothWithout || bothWith {
			separate = false
		}
		h.note(mr.rule, dr)
		mr.rule = mergeRule(mr.rule, dr)
	}
	if separate {
		m[host] = append(list, &mergedRule{rule: dr, exportTo: exportTo})
	}
}

// MergeNote is what of a DestinationRule is not used because it was
// merged into another rule for the same host of its namespace, as Istio
// merges them: its trafficPolicy, when the other has one, or a subset
// whose name the other has.
type MergeNote struct {
	Rule, Into Meta
	// TrafficPolicy is true when the rule's trafficPolicy is not used;
	// else Subset names a subset that is not.
	TrafficPolicy bool
	Subset        string
}

// DestinationRuleMergeNotes returns what merging leaves unused of the
// snapshot's DestinationRules, sorted.
func (s *Snapshot) DestinationRuleMergeNotes() []MergeNote {
	notes := slices.Collect(maps.Keys(s.ruleIndex().notes))
	slices.SortFunc(notes, func(a, b MergeNote) int {
		return cmp.Or(byMeta(a.Rule, b.Rule), byMeta(a.Into, b.Into), cmp.Compare(a.Subset, b.Subset))
	})
	return notes
}

// note records what of dr merging into into leaves unused.
func (h *hostRules) note(into, dr *DestinationRule) {
	if into.Spec.GetTrafficPolicy() != nil && dr.Spec.GetTrafficPolicy() != nil {
		h.notes[MergeNote{Rule: dr.Meta, Into: into.Meta, TrafficPolicy: true}] = true
	}
	for _, ss := range dr.Spec.GetSubsets() {
		if slices.ContainsFunc(into.Spec.GetSubsets(), func(o *networkingv1.Subset) bool { return o.GetName() == ss.GetName() }) {
			h.notes[MergeNote{Rule: dr.Meta, Into: into.Meta, Subset: ss.GetName()}] = true
		}
	}
}

// String says what is unused and why.
func (n MergeNote) String() string {
	what := "trafficPolicy"
	if !n.TrafficPolicy {
		what = "subset " + n.Subset
	}
	return fmt.Sprintf("%s/%s %s: not used, merged into %s/%s, a rule for the same host that comes first "+
		"(workload-selected rules, then the oldest) and has its own", n.Rule.Namespace, n.Rule.Name, what, n.Into.Namespace, n.Into.Name)
}

// mergeRule is a copy of into with dr's subsets whose names it lacks and,
// if it has none, dr's traffic policy.
func mergeRule(into, dr *DestinationRule) *DestinationRule {
	from := into.From
	if from == nil {
		from = []Meta{into.Meta}
	}
	out := &DestinationRule{Meta: into.Meta, Created: into.Created, From: append(slices.Clip(from), dr.Meta)}
	spec := proto.Clone(into.Spec).(*networkingv1.DestinationRule)
	names := map[string]bool{}
	for _, ss := range spec.GetSubsets() {
		names[ss.GetName()] = true
	}
	for _, ss := range dr.Spec.GetSubsets() {
		if !names[ss.GetName()] {
			spec.Subsets = append(spec.Subsets, ss)
		}
	}
	if spec.GetTrafficPolicy() == nil && dr.Spec.GetTrafficPolicy() != nil {
		spec.TrafficPolicy = dr.Spec.GetTrafficPolicy()
	}
	out.Spec = spec
	return out
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, e := range a {
		if !slices.Contains(b, e) {
			return false
		}
	}
	return true
}
