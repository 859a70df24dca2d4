package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
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
	out := invalidEntry(spec)
	out = append(out, unknownFields("spec", spec, serviceEntryFields)...)
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

// invalidEntry is what Istio's rules refuse of an entry the webhook did
// not see (created before it, or with it off): the model leaves out what
// Envoy would refuse of it (a host, a port, an endpoint), and serves the
// rest.
func invalidEntry(spec map[string]any) []string {
	raw, err := json.Marshal(spec)
	if err != nil {
		return []string{"spec: " + err.Error()}
	}
	se := &networking.ServiceEntry{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, se); err != nil {
		return []string{"spec: not a ServiceEntry: " + err.Error()}
	}
	// The namespace is not known here: "." names it.
	se.ExportTo = slices.DeleteFunc(se.ExportTo, func(e string) bool { return e == "." })
	f := ValidateServiceEntry("", nil, se)
	out := make([]string, 0, len(f.Errors))
	for _, e := range f.Errors {
		out = append(out, e+" (refused by Istio's rules: what Envoy would refuse of it is not served)")
	}
	return out
}
