package authn

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

func TestParseClusterAliases(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    ClusterAliases
		wantErr string
	}{
		"empty is none":                   {in: "", want: ClusterAliases{}},
		"Istio's example":                 {in: "alias1=cluster1,alias2=cluster2", want: ClusterAliases{"alias1": "cluster1", "alias2": "cluster2"}},
		"spaces around names are ignored": {in: " old = new ", want: ClusterAliases{"old": "new"}},
		"a pair without '='":              {in: "old", wantErr: "want <alias>=<cluster>"},
		"an alias given twice":            {in: "old=a,old=b", wantErr: "given twice"},
		"too many":                        {in: manyAliases(MaxClusterAliases + 1), wantErr: "more than 64"},
		"too long":                        {in: strings.Repeat("x", 40000), wantErr: "bytes, limit"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseClusterAliases(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseClusterAliases(%.40q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("ParseClusterAliases(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func manyAliases(n int) string {
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf("old-%d=new-%d", i, i)
	}
	return strings.Join(pairs, ",")
}

func TestClusterAliasesValidate(t *testing.T) {
	tests := map[string]struct {
		aliases ClusterAliases
		wantErr string
	}{
		"none": {aliases: nil},
		"an alias of the own cluster and one of a remote": {aliases: ClusterAliases{"old-a": "A", "old-b": "B"}},
		"as many as allowed":                              {aliases: mustParse(t, manyAliases(MaxClusterAliases))},
		"too many":                                        {aliases: mustParse(t, manyAliases(MaxClusterAliases)).with("x", "y"), wantErr: "limit 64"},
		"an empty alias":                                  {aliases: ClusterAliases{"": "B"}, wantErr: "1-253 bytes"},
		"an empty cluster":                                {aliases: ClusterAliases{"old": ""}, wantErr: "1-253 bytes"},
		"an ID over 253 bytes":                            {aliases: ClusterAliases{"old": strings.Repeat("b", 254)}, wantErr: "1-253 bytes"},
		"a slash in an ID":                                {aliases: ClusterAliases{"old/x": "B"}, wantErr: "'/'"},
		"a space in an ID":                                {aliases: ClusterAliases{"old": "B C"}, wantErr: "' '"},
		"an alias of itself":                              {aliases: ClusterAliases{"B": "B"}, wantErr: "names itself"},
		"istiod's own ID as an alias":                     {aliases: ClusterAliases{"A": "B"}, wantErr: "istiod's own cluster ID"},
		"a chain":                                         {aliases: ClusterAliases{"older": "old", "old": "B"}, wantErr: "is itself an alias"},
		"two aliases of one cluster, as Istio":            {aliases: ClusterAliases{"old1": "B", "old2": "B"}, wantErr: "two aliases"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.aliases.Validate("A")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func (a ClusterAliases) with(alias, to string) ClusterAliases {
	out := maps.Clone(a)
	out[alias] = to
	return out
}

func mustParse(t *testing.T, s string) ClusterAliases {
	t.Helper()
	a, err := ParseClusterAliases(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestClusterAliasesResolve(t *testing.T) {
	a := ClusterAliases{"old": "B"}
	for in, want := range map[string]string{"old": "B", "B": "B", "": "", "other": "other"} {
		if got := a.Resolve(in); got != want {
			t.Errorf("Resolve(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ClusterAliases(nil).Resolve("old"); got != "old" {
		t.Errorf("nil aliases resolve %q", got)
	}
}

// FuzzParseClusterAliases: whatever the flag's value, parsing ends with
// an error or aliases that Validate judges without panicking, and every
// valid set resolves each alias to a cluster that is no alias.
func FuzzParseClusterAliases(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b,c=d", "a=b,b=c", "=", ",", "a=b,a=c", " x = y ", "a==b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseClusterAliases(s)
		if err != nil {
			return
		}
		if len(a) > MaxClusterAliases {
			t.Fatalf("%d aliases parsed", len(a))
		}
		if a.Validate("own") != nil {
			return
		}
		for alias := range a {
			to := a.Resolve(alias)
			if _, chained := a[to]; chained || to == alias || alias == "own" {
				t.Fatalf("valid aliases %v resolve %q to %q", a, alias, to)
			}
		}
	})
}
