package policy

import (
	"fmt"
	"regexp/syntax"
)

// Limits on what a Gateway or a VirtualService may hold. They are generous
// for any real configuration and bound what one object can cost every
// gateway that reads it.
const (
	// MaxRegexLength is Istio's own bound on a regex's length.
	MaxRegexLength = 1024
	// MaxRegexProgramSize bounds a regex's compiled program. Envoy
	// refuses a route configuration holding a program bigger than the
	// runtime key re2.max_program_size.error_level, which the bootstrap
	// pilot-agent writes sets to 32768 (Envoy's own default is 100). Go
	// counts a program's instructions close to RE2 but not exactly, so
	// the bound is half of that.
	MaxRegexProgramSize = 16384
	// MaxGatewayServers bounds the servers of one Gateway.
	MaxGatewayServers = 1024
	// MaxHosts bounds the hosts of one Gateway server, and of one
	// VirtualService.
	MaxHosts = 1024
	// MaxRoutes bounds the http, tls and tcp routes of one VirtualService
	// together, and the matches of one route.
	MaxRoutes = 4096
	// MaxDirectResponseBytes is Istio's bound on a direct response body.
	MaxDirectResponseBytes = 1 << 20
)

// CheckRegex says why Envoy would refuse re as a safe_regex (Google RE2):
// it does not parse as RE2 syntax, is longer than MaxRegexLength, or
// compiles to a program of more than MaxRegexProgramSize instructions.
// Empty when Envoy accepts it. The program is Go's compilation of the
// simplified expression, as regexp.Compile makes it, which counts
// instructions as RE2 does, closely but not exactly.
func CheckRegex(re string) string {
	if len(re) > MaxRegexLength {
		return fmt.Sprintf("regex of %d bytes is longer than %d", len(re), MaxRegexLength)
	}
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return fmt.Sprintf("regex %s is not RE2 syntax: %s", quote(re), syntaxReason(err))
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return fmt.Sprintf("regex %s does not compile: %s", quote(re), syntaxReason(err))
	}
	if n := len(prog.Inst); n > MaxRegexProgramSize {
		return fmt.Sprintf("regex %s compiles to a program of size %d; Envoy refuses more than %d", quote(re), n, MaxRegexProgramSize)
	}
	return ""
}

func syntaxReason(err error) string {
	if e, ok := err.(*syntax.Error); ok {
		return string(e.Code) + " " + quote(e.Expr)
	}
	return err.Error()
}
