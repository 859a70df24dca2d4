package authn

import (
	"errors"
	"slices"
	"testing"
)

func TestParseJWTRule(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    JWTRule
		wantErr bool
	}{
		"a rule with a JWKS URI is parsed": {
			in:   `{"issuer":"https://issuer.example","jwks_uri":"https://issuer.example/keys","audiences":["istio-ca"]}`,
			want: JWTRule{Issuer: "https://issuer.example", JWKSURI: "https://issuer.example/keys", Audiences: []string{"istio-ca"}},
		},
		"a rule without a JWKS URI uses discovery": {
			in:   `{"issuer":"https://container.googleapis.com/v1/projects/p/locations/l/clusters/c","audiences":["a","b"]}`,
			want: JWTRule{Issuer: "https://container.googleapis.com/v1/projects/p/locations/l/clusters/c", Audiences: []string{"a", "b"}},
		},
		"an http issuer on localhost is allowed": {
			in:   `{"issuer":"http://localhost:8080","audiences":["a"]}`,
			want: JWTRule{Issuer: "http://localhost:8080", Audiences: []string{"a"}},
		},
		"an http issuer on a loopback address is allowed": {
			in:   `{"issuer":"http://[::1]:8080","jwks_uri":"http://127.0.0.2/keys","audiences":["a"]}`,
			want: JWTRule{Issuer: "http://[::1]:8080", JWKSURI: "http://127.0.0.2/keys", Audiences: []string{"a"}},
		},
		"an http issuer elsewhere is refused":    {in: `{"issuer":"http://issuer.example","audiences":["a"]}`, wantErr: true},
		"an http JWKS URI elsewhere is refused":  {in: `{"issuer":"https://issuer.example","jwks_uri":"http://issuer.example/keys","audiences":["a"]}`, wantErr: true},
		"a file issuer is refused":               {in: `{"issuer":"file:///etc/keys","audiences":["a"]}`, wantErr: true},
		"a relative issuer is refused":           {in: `{"issuer":"issuer.example","audiences":["a"]}`, wantErr: true},
		"an issuer with a query is refused":      {in: `{"issuer":"https://issuer.example?x=1","audiences":["a"]}`, wantErr: true},
		"an issuer with a fragment is refused":   {in: `{"issuer":"https://issuer.example#x","audiences":["a"]}`, wantErr: true},
		"an issuer with user info is refused":    {in: `{"issuer":"https://u:p@issuer.example","audiences":["a"]}`, wantErr: true},
		"a missing issuer is refused":            {in: `{"audiences":["a"]}`, wantErr: true},
		"missing audiences are refused":          {in: `{"issuer":"https://issuer.example"}`, wantErr: true},
		"empty audiences are refused":            {in: `{"issuer":"https://issuer.example","audiences":[]}`, wantErr: true},
		"an empty audience is refused":           {in: `{"issuer":"https://issuer.example","audiences":[""]}`, wantErr: true},
		"an unknown field is refused":            {in: `{"issuer":"https://issuer.example","audiences":["a"],"jwks":"{}"}`, wantErr: true},
		"a camel-case field is refused":          {in: `{"issuer":"https://issuer.example","audiences":["a"],"jwksUri":"https://x"}`, wantErr: true},
		"trailing data is refused":               {in: `{"issuer":"https://issuer.example","audiences":["a"]} {}`, wantErr: true},
		"an empty string is refused":             {in: ``, wantErr: true},
		"a JSON array is refused":                {in: `[]`, wantErr: true},
		"an audience list of numbers is refused": {in: `{"issuer":"https://issuer.example","audiences":[1]}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseJWTRule(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidJWTRule) {
					t.Fatalf("ParseJWTRule() = %+v, %v; want %v", got, err, ErrInvalidJWTRule)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Issuer != tc.want.Issuer || got.JWKSURI != tc.want.JWKSURI || !slices.Equal(got.Audiences, tc.want.Audiences) {
				t.Errorf("ParseJWTRule() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
