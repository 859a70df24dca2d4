package model

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// DestinationRuleFor is the DestinationRule that applies to the service
// of hostname for a client workload of clientNamespace with labels, as
// Istio's sidecar scope chooses it (the one choice Envoy sidecars and
// proxyless gRPC make; the problem reporter reads the same index's merges,
// DestinationRuleMergeNotes):
//
//  1. The rules that may apply are those of one namespace: the client's
//     own, if it has one for hostname (the root namespace's clients look
//     at the root namespace's rules exported to no one else); else the
//     service's namespace's rules exported to the client's namespace,
//     else the root namespace's. Within a namespace the most specific
//     host decides: the exact host, else the longest matching wildcard
//     ("*.ns.svc.cluster.local" over "*.local" over "*"). A rule's host
//     is resolved in its own namespace when short.
//  2. exportTo (".", "*", namespace names, "~"; the mesh's
//     defaultDestinationRuleExportTo when a rule has none) says which
//     namespaces a rule is exported to; a rule with a workloadSelector is
//     never exported, and applies only to the matching workloads of its
//     own namespace.
//  3. Several rules for one host in one namespace are merged as Istio
//     merges them (see mergeRule): the oldest one's traffic policy, the
//     others' subsets added unless their name is taken.
//  4. Of the rules chosen, a matching workload-selected rule of the
//     client's namespace wins; else the last without a selector; else
//     none, even when another namespace has a rule for hostname.
//
// It returns nil when hostname is no service.
func (s *Snapshot) DestinationRuleFor(hostname, clientNamespace string, labels map[string]string) *DestinationRule {
	svc := s.Service(hostname)
	if svc == nil {
		return nil
	}
	var catchAll *DestinationRule
	for _, r := range s.ruleIndex().candidates(s.Options.RootNamespace, clientNamespace, svc) {
		sel := r.rule.Spec.GetWorkloadSelector()
		if sel == nil {
			catchAll = r.rule
			continue
		}
		if r.rule.Namespace == clientNamespace && Matches(sel.GetMatchLabels(), labels) {
			return r.rule
		}
	}
	return catchAll
}

// DestinationRulesOf returns the rules of any namespace whose host is
// hostname or a wildcard matching it: those that some client may see for
// it, as written.
func (s *Snapshot) DestinationRulesOf(hostname string) []*DestinationRule {
	var out []*DestinationRule
	for _, dr := range s.res.DestinationRules {
		if hostMatches(s.resolveHost(dr.Spec.GetHost(), dr.Namespace), hostname) {
			out = append(out, dr)
		}
	}
	return out
}

// SelectsClients reports whether a DestinationRule has a workloadSelector:
// then which rule applies to a client depends on its labels, not only on
// its namespace.
func (s *Snapshot) SelectsClients() bool { return s.clientSelected }

// Key identifies the rule, or the rules merged into it, in one string.
func (d *DestinationRule) Key() string {
	if d == nil {
		return ""
	}
	from := d.From
	if from == nil {
		from = []Meta{d.Meta}
	}
	var b strings.Builder
	for _, m := range from {
		b.WriteString(m.Namespace)
		b.WriteByte('/')
		b.WriteString(m.Name)
		b.WriteByte(';')
	}
	return b.String()
}

// resolveHost expands a short host name, one without a dot, to the FQDN
// in namespace, as Istio does; "svc.ns" is taken as written, so it names
// no Kubernetes service; "*" and IP addresses stay as they are.
func (s *Snapshot) resolveHost(host, namespace string) string {
	if host == "" || host == "*" || strings.Contains(host, ".") {
		return host
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host
	}
	return host + "." + namespace + ".svc." + s.Options.Domain
}

// hostMatches reports whether the rule host pattern matches hostname: the
// same name, or a wildcard "*<suffix>" whose suffix ends hostname.
func hostMatches(pattern, hostname string) bool {
	if wild, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(hostname, wild)
	}
	return pattern == hostname
}

// moreSpecific reports whether host pattern a is more specific than b:
// an exact name over a wildcard, then the longer, then the first
// alphabetically.
func moreSpecific(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	if aw != bw {
		return !aw
	}
	if len(a) == len(b) {
		return a < b
	}
	return len(a) > len(b)
}

// lazyRules builds a snapshot's rule index once, when first asked.
type lazyRules struct {
	once sync.Once
	idx  *ruleIndex
}

func (s *Snapshot) ruleIndex() *ruleIndex {
	l := s.rules
	if l == nil { // a Snapshot not made by Build: index every time
		l = &lazyRules{}
	}
	l.once.Do(func() { l.idx = s.indexRules() })
	return l.idx
}

// ruleIndex holds a snapshot's DestinationRules as Istio's push context
// does: per namespace, the rules its own clients see, and the rules it
// exports to others; and the root namespace's rules exported to no one.
type ruleIndex struct {
	local     map[string]*hostRules
	exported  map[string]*hostRules
	rootLocal *hostRules
	notes     map[MergeNote]bool // what merging left unused
}

// hostRules are the merged rules of one namespace, by resolved host.
type hostRules struct {
	exact    map[string][]*mergedRule
	wildcard map[string][]*mergedRule
	notes    map[MergeNote]bool // shared with the index
}

// mergedRule is a rule, or several merged, with the exportTo of the
// first; empty exportTo is none given.
type mergedRule struct {
	rule     *DestinationRule
	exportTo []string
}

func (s *Snapshot) indexRules() *ruleIndex {
	idx := &ruleIndex{local: map[string]*hostRules{}, exported: map[string]*hostRules{}, notes: map[MergeNote]bool{}}
	newHostRules := func() *hostRules {
		return &hostRules{exact: map[string][]*mergedRule{}, wildcard: map[string][]*mergedRule{}, notes: idx.notes}
	}
	idx.rootLocal = newHostRules()
	rules := slices.Clone(s.res.DestinationRules)
	// Istio's order: rules with a workloadSelector first, then the
	// oldest, then by name and namespace.
	slices.SortStableFunc(rules, func(a, b *DestinationRule) int {
		as, bs := a.Spec.GetWorkloadSelector() != nil, b.Spec.GetWorkloadSelector() != nil
		if as != bs {
			if as {
				return -1
			}
			return 1
		}
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
	})
	defaultPrivate := slices.Contains(defaultExportTo(s.Options.DefaultDestinationRuleExportTo), ExportPrivate)
	for _, dr := range rules {
		host := s.resolveHost(dr.Spec.GetHost(), dr.Namespace)
		ns := dr.Namespace
		exportTo := []string{ExportPrivate} // a workload-selected rule stays home
		if dr.Spec.GetWorkloadSelector() == nil {
			exportTo = slices.Compact(slices.Sorted(slices.Values(dr.Spec.GetExportTo())))
		}
		has := func(e string) bool { return slices.Contains(exportTo, e) }
		if len(exportTo) == 0 || has(ExportPublic) || has(ExportPrivate) || has(ns) {
			if idx.local[ns] == nil {
				idx.local[ns] = newHostRules()
			}
			idx.local[ns].merge(host, dr, exportTo)
		}
		privateOnly := (len(exportTo) == 0 && defaultPrivate) || (len(exportTo) == 1 && (has(ExportPrivate) || has(ns)))
		switch {
		case !privateOnly:
			if idx.exported[ns] == nil {
				idx.exported[ns] = newHostRules()
			}
			idx.exported[ns].merge(host, dr, exportTo)
		case ns == s.Options.RootNamespace:
			idx.rootLocal.merge(host, dr, exportTo)
		}
	}
	return idx
}

// match is h's rules of the most specific host that matches hostname.
func (h *hostRules) match(hostname string) ([]*mergedRule, bool) {
	if h == nil {
		return nil, false
	}
	if rs, ok := h.exact[hostname]; ok {
		return rs, true
	}
	var best string
	var found bool
	for pattern := range h.wildcard {
		if hostMatches(pattern, hostname) && (!found || moreSpecific(pattern, best)) {
			best, found = pattern, true
		}
	}
	return h.wildcard[best], found
}

// candidates are the rules one namespace holds for svc's hostname that a
// client of clientNamespace may see (step 1 of DestinationRuleFor).
func (x *ruleIndex) candidates(root, clientNamespace string, svc *Service) []*mergedRule {
	own := x.local[clientNamespace]
	if clientNamespace == root {
		own = x.rootLocal
	}
	if rs, ok := own.match(svc.Hostname); ok {
		return rs
	}
	if rs := x.exportedFrom(svc.Namespace, svc.Hostname, clientNamespace); len(rs) > 0 {
		return rs
	}
	return x.exportedFrom(root, svc.Hostname, clientNamespace)
}

// exportedFrom are the rules namespace exports for hostname, of its most
// specific matching host, that are exported to clientNamespace.
func (x *ruleIndex) exportedFrom(namespace, hostname, clientNamespace string) []*mergedRule {
	rs, ok := x.exported[namespace].match(hostname)
	if !ok {
		return nil
	}
	to := func(r *mergedRule) bool {
		return len(r.exportTo) == 0 || slices.Contains(r.exportTo, ExportPublic) || slices.Contains(r.exportTo, clientNamespace)
	}
	if !slices.ContainsFunc(rs, func(r *mergedRule) bool { return !to(r) }) {
		return rs // all of them, as most often: no copy
	}
	var out []*mergedRule
	for _, r := range rs {
		if to(r) {
			out = append(out, r)
		}
	}
	return out
}
