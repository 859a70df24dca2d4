package envoygen

import (
	"strings"
	"testing"
)

// TestKeyIsLengthPrefixedParts: a key is "envoy", then each part as
// "|<length>:<part>", whatever the parts' lengths; telemetryKey adds the
// telemetry's key as a last part only when it has one.
func TestKeyIsLengthPrefixedParts(t *testing.T) {
	reference := func(parts ...string) string {
		b := []byte("envoy")
		for _, p := range parts {
			b = appendPart(append(b, '|'), p)
		}
		return string(b)
	}
	for name, parts := range map[string][]string{
		"no part":                      nil,
		"one empty part":               {""},
		"short parts":                  {"cds", "outbound|80||a.b.svc.cluster.local", "0"},
		"parts of 9, 10 and 100 bytes": {strings.Repeat("x", 9), strings.Repeat("y", 10), strings.Repeat("z", 100)},
		"a part of 12345 bytes":        {"lds", strings.Repeat("w", 12345), ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got, want := key(parts...), reference(parts...); got != want {
				t.Errorf("key(%q) = %q, want %q", parts, got, want)
			}
			if got, want := telemetryKey(nil, parts...), reference(parts...); got != want {
				t.Errorf("telemetryKey(nil, %q) = %q, want %q", parts, got, want)
			}
			if got, want := joinKey(parts, "telemetry", true), reference(append(append([]string(nil), parts...), "telemetry")...); got != want {
				t.Errorf("joinKey(%q, telemetry) = %q, want %q", parts, got, want)
			}
		})
	}
}
