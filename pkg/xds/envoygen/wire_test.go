package envoygen

import (
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
)

// TestWireNestedLengths checks the in-place length of nested messages
// against protobuf's own encoding at every varint width the length takes.
func TestWireNestedLengths(t *testing.T) {
	for name, n := range map[string]int{
		"the longest one-byte length":            0x7f - 4,
		"a length just past one byte":            0x80,
		"a length that needs three bytes":        1 << 14,
		"a length that needs three bytes, again": 1<<14 + 3,
	} {
		t.Run(name, func(t *testing.T) {
			s := strings.Repeat("x", n)
			want, err := proto.Marshal(&tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{
				{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}},
				{SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "b"}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var w wire
			for _, san := range []struct {
				kind tlsv3.SubjectAltNameMatcher_SanType
				s    string
			}{{tlsv3.SubjectAltNameMatcher_URI, s}, {tlsv3.SubjectAltNameMatcher_DNS, "b"}} {
				var m, sm int
				w, m = w.open(validationTypedSANs)
				w = w.varint(sanMatcherType, uint64(san.kind))
				w, sm = w.open(sanMatcherMatcher)
				w = w.str(stringMatcherExact, san.s).close(sm).close(m)
			}
			if string(w) != string(want) {
				t.Errorf("wire form differs from protobuf's:\n got %x\nwant %x", w[:min(len(w), 40)], want[:min(len(want), 40)])
			}
		})
	}
}
