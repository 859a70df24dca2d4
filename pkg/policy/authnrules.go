package policy

import (
	"slices"
	"strconv"

	security "istio.io/api/security/v1beta1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
)

// ValidatePeerAuthentication checks a PeerAuthentication as the validating
// webhook does.
func ValidatePeerAuthentication(pa *security.PeerAuthentication) Findings {
	var f Findings
	checkSelector(&f, "spec.selector", pa.GetSelector())
	if m := pa.GetMtls(); m != nil {
		checkMTLSMode(&f, "spec.mtls.mode", m.GetMode())
	}
	if len(pa.GetPortLevelMtls()) == 0 {
		return f
	}
	if len(pa.GetSelector().GetMatchLabels()) == 0 {
		f.errorf("spec.portLevelMtls", "requires a selector with matchLabels: a mesh- or namespace-wide policy cannot set port-level mTLS")
	}
	ports := make([]uint32, 0, len(pa.GetPortLevelMtls()))
	for port := range pa.GetPortLevelMtls() {
		ports = append(ports, port)
	}
	slices.Sort(ports)
	for _, port := range ports {
		path := "spec.portLevelMtls[" + strconv.FormatUint(uint64(port), 10) + "]"
		f.check(path, checkPortNumber(port))
		m := pa.GetPortLevelMtls()[port]
		if m == nil {
			f.errorf(path, "must not be null")
			continue
		}
		checkMTLSMode(&f, path+".mode", m.GetMode())
	}
	return f
}

func checkMTLSMode(f *Findings, path string, mode security.PeerAuthentication_MutualTLS_Mode) {
	if _, ok := security.PeerAuthentication_MutualTLS_Mode_name[int32(mode)]; !ok {
		f.errorf(path, "%d is not one of UNSET, DISABLE, PERMISSIVE, STRICT", int32(mode))
	}
}

// ValidateRequestAuthentication checks a RequestAuthentication as the
// validating webhook does; urls is what istiod fetches key sets from.
// Where a rule's key set comes from follows CheckJWTKeySource, the rule
// the generator applies.
func ValidateRequestAuthentication(ra *security.RequestAuthentication, urls keyfetch.URLRule) Findings {
	var f Findings
	checkTargets(&f, ra.GetSelector(), ra.GetTargetRef(), ra.GetTargetRefs())
	for i, r := range ra.GetJwtRules() {
		checkJWTRule(&f, urls, at("spec.jwtRules", i), r)
	}
	return f
}

func checkJWTRule(f *Findings, urls keyfetch.URLRule, path string, r *security.JWTRule) {
	if r == nil {
		f.errorf(path, "must not be null")
		return
	}
	if r.GetIssuer() == "" {
		f.errorf(path+".issuer", "must be set")
	}
	for i, a := range r.GetAudiences() {
		f.check(at(path+".audiences", i), nonEmpty(a))
	}
	if r.GetJwksUri() != "" && r.GetJwks() != "" {
		f.errorf(path, "set jwks or jwksUri, not both")
	}
	if p := CheckJWTKeySource(r, urls); p != nil && !(p.Field == "issuer" && r.GetIssuer() == "") {
		f.errorf(path+"."+p.Field, "%s", p.Admission)
	}
	for i, h := range r.GetFromHeaders() {
		hp := at(path+".fromHeaders", i)
		if h == nil {
			f.errorf(hp, "must not be null")
			continue
		}
		f.check(hp+".name", nonEmpty(h.GetName()))
	}
	for i, s := range r.GetFromParams() {
		f.check(at(path+".fromParams", i), nonEmpty(s))
	}
	for i, s := range r.GetFromCookies() {
		f.check(at(path+".fromCookies", i), nonEmpty(s))
	}
	for i, c := range r.GetOutputClaimToHeaders() {
		cp := at(path+".outputClaimToHeaders", i)
		if c == nil {
			f.errorf(cp, "must not be null")
			continue
		}
		f.check(cp+".claim", nonEmpty(c.GetClaim()))
		f.check(cp+".header", checkOutputHeader(c.GetHeader()))
	}
	if h := r.GetOutputPayloadToHeader(); h != "" {
		f.check(path+".outputPayloadToHeader", checkOutputHeader(h))
	}
	if r.GetTimeout() != nil {
		f.check(path+".timeout", checkDuration(r.GetTimeout()))
	}
}

// KeySourceProblem is why a jwtRule's key set rejects every token,
// whatever istiod fetches.
type KeySourceProblem struct {
	// Field is the rule's field at fault: "jwks", "jwksUri" or "issuer".
	Field string
	// Reason says it as the generator's problem log does.
	Reason string
	// Admission says it as the webhook does, after the field's path.
	Admission string
}

// JWTKeySource is where a jwtRule's key set is fetched from; false when
// it has inline jwks or names nothing to fetch.
func JWTKeySource(r *security.JWTRule) (keyfetch.JWKSSource, bool) {
	if r.GetJwks() != "" || (r.GetIssuer() == "" && r.GetJwksUri() == "") {
		return keyfetch.JWKSSource{}, false
	}
	return keyfetch.JWKSSource{Issuer: r.GetIssuer(), JWKSURI: r.GetJwksUri()}, true
}

// CheckJWTKeySource is the rule for a jwtRule's key set, nil when it may
// verify tokens: inline jwks must hold a usable public signing key
// (keyfetch.CheckJWKS); otherwise the key set is fetched from jwksUri or,
// without it, from the issuer's discovery document, which urls must let
// istiod fetch. The webhook refuses by it, and the generator refuses
// every token of the issuer by it.
func CheckJWTKeySource(r *security.JWTRule, urls keyfetch.URLRule) *KeySourceProblem {
	if j := r.GetJwks(); j != "" {
		if keyfetch.CheckJWKS(j) != nil {
			return &KeySourceProblem{Field: "jwks", Reason: "its jwks holds no usable public signing key",
				Admission: "is not a JSON Web Key Set holding a usable public signing key"}
		}
		return nil
	}
	src, ok := JWTKeySource(r)
	if !ok {
		return &KeySourceProblem{Field: "issuer", Reason: "neither issuer nor jwksUri", Admission: "must be set"}
	}
	err := urls.CheckSource(src)
	switch {
	case err == nil:
		return nil
	case src.JWKSURI != "":
		return &KeySourceProblem{Field: "jwksUri", Reason: "its jwksUri is not fetched: " + err.Error(),
			Admission: quote(src.JWKSURI) + " is not fetched: " + err.Error()}
	}
	return &KeySourceProblem{Field: "issuer", Reason: "its issuer's discovery document is not fetched: " + err.Error(),
		Admission: quote(src.Issuer) + ": without jwks or jwksUri, the key set is found by the issuer's discovery document, which is not fetched: " + err.Error()}
}
