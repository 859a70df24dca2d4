package routes

import (
	"errors"
	"sync"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// Regexes go to Envoy's RE2 engine, which refuses (and so NACKs the whole
// route configuration) a pattern it cannot compile or whose compiled
// program is too large. A pattern is sent only when policy.CheckRegex,
// the rule the validating webhook applies too, admits it.

// regexes remembers the verdicts of checkRegex: configurations repeat
// their patterns, and compiling is the costly part of a translation. A nil
// *regexes remembers nothing. Safe for concurrent use.
type regexes struct {
	mu       sync.Mutex
	verdicts map[string]error
}

func (rs *regexes) check(re string) error {
	if rs == nil {
		return checkRegex(re)
	}
	rs.mu.Lock()
	err, ok := rs.verdicts[re]
	rs.mu.Unlock()
	if ok {
		return err
	}
	err = checkRegex(re)
	rs.mu.Lock()
	if rs.verdicts == nil {
		rs.verdicts = map[string]error{}
	}
	if len(rs.verdicts) < maxRemembered {
		rs.verdicts[re] = err
	}
	rs.mu.Unlock()
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
