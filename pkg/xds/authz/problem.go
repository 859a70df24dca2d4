package authz

import (
	"fmt"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Problem is a part of a policy that could not be translated as written:
// invalid (Istio's validation would refuse it) or unsupported by the data
// plane. The translation failed closed in the way Effect says; the rest of
// the policy, and every other policy, still applies.
type Problem struct {
	Policy model.Meta
	// Rule is the index of the rule in spec.rules, or -1 when the problem
	// is the policy's as a whole.
	Rule int
	// Field locates the problem inside the rule, e.g.
	// "from[0].source.ipBlocks" or "when[1]"; empty for the whole rule.
	Field  string
	Reason string
	Effect Effect
}

func (p Problem) String() string {
	where := p.Policy.Namespace + "/" + p.Policy.Name
	if p.Rule >= 0 {
		where += fmt.Sprintf(" rules[%d]", p.Rule)
		if p.Field != "" {
			where += "." + p.Field
		}
	}
	return where + ": " + p.Reason + ": " + p.Effect.String()
}

// Effect is how a translation failed closed.
type Effect int

const (
	// Dropped: the ALLOW rule was left out, so it allows nothing.
	Dropped Effect = iota
	// Widened: the DENY (or AUDIT) rule was kept without the offending
	// condition or value, so it matches more requests than written.
	Widened
	// DeniesAll: the policy denies every request to the workload.
	DeniesAll
	// Ignored: the policy can neither allow nor deny anything (AUDIT where
	// the data plane has no audit, DENY without rules).
	Ignored
)

func (e Effect) String() string {
	switch e {
	case Dropped:
		return "rule dropped, it allows nothing"
	case Widened:
		return "left out, the rule matches more"
	case DeniesAll:
		return "every request is denied"
	case Ignored:
		return "policy has no effect"
	}
	return fmt.Sprintf("Effect(%d)", int(e))
}
