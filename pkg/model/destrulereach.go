package model

import "slices"

// RuleAudience is the namespaces whose workloads a DestinationRule may
// apply to; DestinationRuleFor gives it to some of them at most.
type RuleAudience struct {
	home string   // the rule's namespace
	all  bool     // every namespace
	to   []string // other namespaces by name
}

// Reaches reports whether the rule may apply to a workload of namespace.
func (a RuleAudience) Reaches(namespace string) bool {
	return a.all || namespace == a.home || slices.Contains(a.to, namespace)
}

// DestinationRuleAudience returns who dr may apply to as s holds it: the
// namespaces its exportTo names (the mesh's defaultDestinationRuleExportTo
// when it names none), its own always, and those of the rules of its
// namespace and host it is merged with (DestinationRuleFor's step 3: a
// merge travels with the first rule's exportTo). A rule with a
// workloadSelector stays in its namespace.
func (s *Snapshot) DestinationRuleAudience(dr *DestinationRule) RuleAudience {
	out := RuleAudience{home: dr.Namespace}
	host := s.resolveHost(dr.Spec.GetHost(), dr.Namespace)
	add := func(r *DestinationRule) {
		if r.Spec.GetWorkloadSelector() != nil {
			return
		}
		exportTo := r.Spec.GetExportTo()
		if len(exportTo) == 0 {
			exportTo = defaultExportTo(s.Options.DefaultDestinationRuleExportTo)
		}
		for _, e := range exportTo {
			switch e {
			case ExportPublic:
				out.all = true
			case ExportPrivate, ExportNone, r.Namespace:
			default:
				if !slices.Contains(out.to, e) {
					out.to = append(out.to, e)
				}
			}
		}
	}
	add(dr)
	for _, r := range s.res.DestinationRules {
		if r != dr && r.Namespace == dr.Namespace && s.resolveHost(r.Spec.GetHost(), r.Namespace) == host {
			add(r)
		}
	}
	return out
}
