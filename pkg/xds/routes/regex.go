package routes

import (
	"errors"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// Regexes go to Envoy's RE2 engine, which refuses (and so NACKs the whole
// route configuration) a pattern it cannot compile or whose compiled
// program is too large. A pattern is sent only when policy.CheckRegex,
// the rule the validating webhook applies too, admits it.

// regexes remembers the verdicts of checkRegex: configurations repeat
// their patterns, and compiling is the costly part of a translation. A nil
// *regexes remembers nothing.
type regexes map[string]error

func (rs regexes) check(re string) error {
	if rs == nil {
		return checkRegex(re)
	}
	if err, ok := rs[re]; ok {
		return err
	}
	err := checkRegex(re)
	if len(rs) < maxRemembered {
		rs[re] = err
	}
	return err
}

// maxRemembered bounds the verdicts one translation keeps.
const maxRemembered = 10000

// checkRegex says why Envoy would refuse re, or nil.
func checkRegex(re string) error {
	if why := policy.CheckRegex(re); why != "" {
		return errors.New(why)
	}
	return nil
}
