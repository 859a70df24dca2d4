package policy

import (
	"fmt"
	"net/netip"
)

// The fields of a ServiceEntry the generators read (pkg/model converts
// each host into a service, pkg/xds/envoygen serves it).
var (
	serviceEntryFields = set("hosts", "addresses", "ports", "location", "resolution", "endpoints",
		"workloadSelector", "subjectAltNames", "exportTo")
	entryPortFields     = set("number", "name", "protocol", "targetPort")
	entryEndpointFields = set("address", "ports", "labels", "locality", "weight", "serviceAccount")
)

func ignoredInServiceEntry(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, serviceEntryFields)
	if spec["resolution"] == "DYNAMIC_DNS" {
		out = append(out, "spec.resolution: DYNAMIC_DNS is not served; the hosts get clusters without endpoints")
	}
	for i, a := range list(spec["addresses"]) {
		s, _ := a.(string)
		if p, err := netip.ParsePrefix(s); err == nil && p.Bits() != p.Addr().BitLen() {
			out = append(out, fmt.Sprintf("spec.addresses[%d]: a CIDR range is not listened on; only addresses are", i))
		}
	}
	for i, p := range list(spec["ports"]) {
		out = append(out, unknownFields(fmt.Sprintf("spec.ports[%d]", i), object(p), entryPortFields)...)
	}
	for i, ep := range list(spec["endpoints"]) {
		out = append(out, unknownFields(fmt.Sprintf("spec.endpoints[%d]", i), object(ep), entryEndpointFields)...)
	}
	return out
}
