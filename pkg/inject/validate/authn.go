package validate

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	security "istio.io/api/security/v1beta1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
)

func checkPeerAuthentication(p *problems, pa *security.PeerAuthentication) {
	checkSelector(p, "spec.selector", pa.GetSelector())
	if m := pa.GetMtls(); m != nil {
		checkMTLSMode(p, "spec.mtls.mode", m.GetMode())
	}
	if len(pa.GetPortLevelMtls()) == 0 {
		return
	}
	if len(pa.GetSelector().GetMatchLabels()) == 0 {
		p.addf("spec.portLevelMtls", "requires a selector with matchLabels: a mesh- or namespace-wide policy cannot set port-level mTLS")
	}
	ports := make([]uint32, 0, len(pa.GetPortLevelMtls()))
	for port := range pa.GetPortLevelMtls() {
		ports = append(ports, port)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	for _, port := range ports {
		path := "spec.portLevelMtls[" + strconv.FormatUint(uint64(port), 10) + "]"
		if msg := checkPort(port); msg != "" {
			p.addf(path, "%s", msg)
		}
		m := pa.GetPortLevelMtls()[port]
		if m == nil {
			p.addf(path, "must not be null")
			continue
		}
		checkMTLSMode(p, path+".mode", m.GetMode())
	}
}

func checkMTLSMode(p *problems, path string, mode security.PeerAuthentication_MutualTLS_Mode) {
	if _, ok := security.PeerAuthentication_MutualTLS_Mode_name[int32(mode)]; !ok {
		p.addf(path, "%d is not one of UNSET, DISABLE, PERMISSIVE, STRICT", int32(mode))
	}
}

func checkRequestAuthentication(p *problems, rs rules, ra *security.RequestAuthentication) {
	checkTargets(p, ra.GetSelector(), ra.GetTargetRef(), ra.GetTargetRefs())
	for i, r := range ra.GetJwtRules() {
		checkJWTRule(p, rs, at("spec.jwtRules", i), r)
	}
}

func checkJWTRule(p *problems, rs rules, path string, r *security.JWTRule) {
	if r == nil {
		p.addf(path, "must not be null")
		return
	}
	if r.GetIssuer() == "" {
		p.addf(path+".issuer", "must be set")
	}
	for i, a := range r.GetAudiences() {
		if a == "" {
			p.addf(at(path+".audiences", i), "must not be empty")
		}
	}
	if r.GetJwksUri() != "" && r.GetJwks() != "" {
		p.addf(path, "set jwks or jwksUri, not both")
	}
	checkKeySource(p, rs, path, r)
	if j := r.GetJwks(); j != "" {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal([]byte(j), &set); err != nil || set.Keys == nil {
			p.addf(path+".jwks", "is not a JSON Web Key Set (an object with a \"keys\" array)")
		}
	}
	for i, h := range r.GetFromHeaders() {
		hp := at(path+".fromHeaders", i)
		if h == nil {
			p.addf(hp, "must not be null")
			continue
		}
		if h.GetName() == "" {
			p.addf(hp+".name", "must not be empty")
		}
	}
	for i, s := range r.GetFromParams() {
		if s == "" {
			p.addf(at(path+".fromParams", i), "must not be empty")
		}
	}
	for i, s := range r.GetFromCookies() {
		if s == "" {
			p.addf(at(path+".fromCookies", i), "must not be empty")
		}
	}
	for i, c := range r.GetOutputClaimToHeaders() {
		cp := at(path+".outputClaimToHeaders", i)
		if c == nil {
			p.addf(cp, "must not be null")
			continue
		}
		if c.GetClaim() == "" {
			p.addf(cp+".claim", "must not be empty")
		}
		if msg := checkHeaderName(c.GetHeader()); msg != "" {
			p.addf(cp+".header", "%s", msg)
		}
	}
	if r.GetOutputPayloadToHeader() != "" {
		if msg := checkHeaderName(r.GetOutputPayloadToHeader()); msg != "" {
			p.addf(path+".outputPayloadToHeader", "%s", msg)
		}
	}
	if r.GetTimeout() != nil {
		if msg := checkDuration(r.GetTimeout()); msg != "" {
			p.addf(path+".timeout", "%s", msg)
		}
	}
}

// checkKeySource applies istiod's rule for where a rule's key set is
// fetched from (keyfetch.URLRule.CheckSource, which the generator applies
// too): its jwksUri, or, without jwks or jwksUri, its issuer's discovery
// document.
func checkKeySource(p *problems, rs rules, path string, r *security.JWTRule) {
	src := keyfetch.JWKSSource{Issuer: r.GetIssuer(), JWKSURI: r.GetJwksUri()}
	switch {
	case src.JWKSURI != "":
		if err := rs.jwksURLs.CheckSource(src); err != nil {
			p.addf(path+".jwksUri", "%s is not fetched: %s", quote(src.JWKSURI), err.Error())
		}
	case r.GetJwks() == "" && src.Issuer != "":
		if err := rs.jwksURLs.CheckSource(src); err != nil {
			p.addf(path+".issuer", "%s: without jwks or jwksUri, the key set is found by the issuer's discovery document, which is not fetched: %s", quote(src.Issuer), err.Error())
		}
	}
}

// checkDuration applies Istio's rule for durations: at least 1ms, in
// whole milliseconds.
func checkDuration(d *durationpb.Duration) string {
	if err := d.CheckValid(); err != nil {
		return "is not a valid duration"
	}
	v := d.AsDuration()
	if v < time.Millisecond {
		return "must be at least 1ms"
	}
	if v%time.Millisecond != 0 {
		return "must be in whole milliseconds"
	}
	return ""
}
