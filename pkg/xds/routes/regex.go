package routes

import (
	"fmt"
	"regexp/syntax"
)

// Regexes go to Envoy's RE2 engine, which refuses (and so NACKs the whole
// route configuration) a pattern it cannot compile or whose compiled
// program is larger than the runtime key re2.max_program_size.error_level:
// 100 in Envoy by default, 32768 in the bootstrap pilot-agent writes
// (Istio's tools/packaging/common/envoy_bootstrap.json). Go's regexp is
// RE2's syntax; a pattern is sent only when Go compiles it, it is at most
// MaxRegexLength long (Istio's validation rule) and its Go program has at
// most MaxRegexProgram instructions: half of pilot-agent's limit, as Go's
// program and RE2's are counted differently.
const (
	MaxRegexLength  = 1024
	MaxRegexProgram = 16384
)

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
	if len(re) > MaxRegexLength {
		return fmt.Errorf("regex of %d bytes, more than %d", len(re), MaxRegexLength)
	}
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return fmt.Errorf("regex %q: %w", re, err)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return fmt.Errorf("regex %q: %w", re, err)
	}
	if n := len(prog.Inst); n > MaxRegexProgram {
		return fmt.Errorf("regex %q compiles to %d instructions, more than %d", re, n, MaxRegexProgram)
	}
	return nil
}
