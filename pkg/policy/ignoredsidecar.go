package policy

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
)

// The fields of a Sidecar that Envoy sidecars honour (pkg/model chooses
// a proxy's Sidecar and reads its egress hosts, pkg/xds/envoygen scopes
// the proxy's configuration by them and builds its ingress listeners):
// workloadSelector, egress hosts and port numbers, outboundTrafficPolicy
// mode, ingress listeners (port, bind as the chains' name,
// defaultEndpoint, captureMode DEFAULT and IPTABLES, connectionPool, and
// tls where istiod is told to), inboundConnectionPool.
var sidecarPortFields = set("number", "name", "protocol")

func ignoredInSidecar(_ map[string]string, spec map[string]any) []string {
	out := invalidSidecar(spec)
	for i, in := range list(spec["ingress"]) {
		p := fmt.Sprintf("spec.ingress[%d]", i)
		l := object(in)
		if m, _ := l["captureMode"].(string); m == "NONE" {
			out = append(out, p+".captureMode: NONE is not honoured: no listener is bound to the port; traffic redirected to it takes the inbound passthrough chains (its cluster is built)")
		}
		if _, ok := l["tls"]; ok {
			out = append(out, p+".tls: honoured only where istiod runs with ENABLE_TLS_ON_SIDECAR_INGRESS=true (--tls-on-sidecar-ingress), as in Istio; otherwise the port is served as without it")
		}
		out = append(out, unknownFields(p, l, set("port", "bind", "captureMode", "defaultEndpoint", "tls", "connectionPool"))...)
		if port := object(l["port"]); port != nil {
			out = append(out, unknownFields(p+".port", port, sidecarPortFields)...)
		}
	}
	out = append(out, unknownFields("spec", spec, set("workloadSelector", "egress", "outboundTrafficPolicy", "ingress", "inboundConnectionPool"))...)
	for i, e := range list(spec["egress"]) {
		p := fmt.Sprintf("spec.egress[%d]", i)
		eg := object(e)
		if b, _ := eg["bind"].(string); b != "" {
			out = append(out, p+".bind: not honoured; the listener's services are served on their own addresses as without it")
		}
		if m, _ := eg["captureMode"].(string); m != "" && m != "DEFAULT" {
			out = append(out, p+".captureMode: not honoured; traffic is captured as by default")
		}
		out = append(out, unknownFields(p, eg, set("hosts", "port", "bind", "captureMode"))...)
		if port := object(eg["port"]); port != nil {
			if proto, _ := port["protocol"].(string); proto != "" {
				out = append(out, p+".port.protocol: not honoured; the services' ports keep their own protocols (the listener imports only their port of this number)")
			}
			out = append(out, unknownFields(p+".port", port, sidecarPortFields)...)
		}
	}
	if tp := object(spec["outboundTrafficPolicy"]); tp != nil {
		if _, ok := tp["egressProxy"]; ok {
			out = append(out, "spec.outboundTrafficPolicy.egressProxy: not honoured; unknown destinations pass through directly under ALLOW_ANY")
		}
		out = append(out, unknownFields("spec.outboundTrafficPolicy", tp, set("mode", "egressProxy"))...)
	}
	return out
}

// invalidSidecar is what Istio's rules refuse of a Sidecar the webhook did
// not see (created before it, or with it off): its egress hosts are read
// as Istio reads them, a malformed one importing nothing.
func invalidSidecar(spec map[string]any) []string {
	raw, err := json.Marshal(spec)
	if err != nil {
		return []string{"spec: " + err.Error()}
	}
	sc := &networking.Sidecar{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, sc); err != nil {
		return []string{"spec: not a Sidecar: " + err.Error()}
	}
	f := ValidateSidecar("", sc)
	out := make([]string, 0, len(f.Errors))
	for _, e := range f.Errors {
		out = append(out, e+" (refused by Istio's rules)")
	}
	return out
}
