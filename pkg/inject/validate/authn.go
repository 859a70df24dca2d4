package validate

import (
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	security "istio.io/api/security/v1beta1"
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

func checkRequestAuthentication(p *problems, ra *security.RequestAuthentication) {
	checkTargets(p, ra.GetSelector(), ra.GetTargetRef(), ra.GetTargetRefs())
	for i, r := range ra.GetJwtRules() {
		checkJWTRule(p, at("spec.jwtRules", i), r)
	}
}

func checkJWTRule(p *problems, path string, r *security.JWTRule) {
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
	if u := r.GetJwksUri(); u != "" {
		if msg := checkJWKSURI(u); msg != "" {
			p.addf(path+".jwksUri", "%s", msg)
		}
	}
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

func checkJWKSURI(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return quote(s) + " is not a URL"
	}
	if u.Scheme != "https" {
		return quote(s) + " is not an https URL"
	}
	if u.Hostname() == "" {
		return quote(s) + " has no host"
	}
	if port := u.Port(); port != "" {
		if msg := checkPortString(port); msg != "" {
			return msg
		}
	}
	return ""
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
