package policy

import (
	"fmt"
	"maps"
	"slices"
)

// The fields of the kinds Bulwark reads that its generators read (see
// pkg/xds/envoygen, pkg/xds/grpcgen and pkg/model): any other field of
// these objects is reported as ignored, so that a field Istio adds later
// is reported too rather than dropped silently.
var (
	destinationRuleFields = set("host", "exportTo", "subsets", "trafficPolicy", "workloadSelector")
	subsetFields          = set("name", "labels", "trafficPolicy")
	trafficPolicyFields   = set("tls", "portLevelSettings", "connectionPool")
	portPolicyFields      = set("port", "tls", "connectionPool")
)

func set(names ...string) map[string]bool {
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// notAttached is why a policy attached by targetRef(s) does nothing.
const notAttached = "attaches the policy to gateways or waypoints, which Bulwark does not serve; it applies to no sidecar"

func ignoredInAuthorizationPolicy(annotations map[string]string, spec map[string]any) []string {
	out := ignoredTargetRefs(spec)
	if annotations["istio.io/dry-run"] == "true" {
		out = append(out, "metadata.annotations[istio.io/dry-run]: the policy is not evaluated at all (Istio logs what it would decide)")
	}
	return out
}

func ignoredInRequestAuthentication(_ map[string]string, spec map[string]any) []string {
	out := ignoredTargetRefs(spec)
	for i, r := range list(spec["jwtRules"]) {
		if _, ok := object(r)["timeout"]; ok {
			out = append(out, fmt.Sprintf("spec.jwtRules[%d].timeout: not used; istiod fetches key sets with its own limits", i))
		}
	}
	return out
}

func ignoredTargetRefs(spec map[string]any) []string {
	var out []string
	for _, f := range []string{"targetRef", "targetRefs"} {
		if _, ok := spec[f]; ok {
			out = append(out, "spec."+f+": "+notAttached)
		}
	}
	return out
}

func ignoredInDestinationRule(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, destinationRuleFields)
	out = append(out, ignoredInTrafficPolicy("spec.trafficPolicy", object(spec["trafficPolicy"]))...)
	for i, s := range list(spec["subsets"]) {
		path := fmt.Sprintf("spec.subsets[%d]", i)
		sub := object(s)
		out = append(out, unknownFields(path, sub, subsetFields)...)
		out = append(out, ignoredInTrafficPolicy(path+".trafficPolicy", object(sub["trafficPolicy"]))...)
	}
	return out
}

func ignoredInTrafficPolicy(path string, tp map[string]any) []string {
	out := unknownFields(path, tp, trafficPolicyFields)
	out = append(out, partlyConnectionPool(path, tp)...)
	for i, pl := range list(tp["portLevelSettings"]) {
		p := fmt.Sprintf("%s.portLevelSettings[%d]", path, i)
		out = append(out, unknownFields(p, object(pl), portPolicyFields)...)
		out = append(out, partlyConnectionPool(p, object(pl))...)
	}
	return out
}

// partlyConnectionPool says where a DestinationRule's connectionPool is
// not applied: Envoy's clusters take it whole (limits, timeouts, HTTP
// options, h2UpgradePolicy, useClientProtocol); proxyless gRPC clients
// do not read it.
func partlyConnectionPool(path string, policy map[string]any) []string {
	if _, ok := policy["connectionPool"]; !ok {
		return nil
	}
	return []string{path + ".connectionPool: applied by Envoy proxies only, not by proxyless gRPC clients"}
}

// unknownFields names, in order, the fields of obj not in read.
func unknownFields(path string, obj map[string]any, read map[string]bool) []string {
	var out []string
	for _, f := range slices.Sorted(maps.Keys(obj)) {
		if !read[f] {
			out = append(out, path+"."+f+": ignored, not generated")
		}
	}
	return out
}

// object is v as a JSON object, or nil.
func object(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// list is v as a JSON array, or nil.
func list(v any) []any {
	l, _ := v.([]any)
	return l
}
