package policy

import networking "istio.io/api/networking/v1alpha3"

// ClientTLS is the TLS a DestinationRule gives its clients toward port of
// the service, for the endpoints of subset (nil for the whole service),
// as Istio merges it: the subset's port-level setting, the subset's, the
// rule's port-level setting, the rule's. nil when the rule does not say.
// Every generator chooses a cluster's TLS by it.
func ClientTLS(dr *networking.DestinationRule, subset *networking.Subset, port uint32) *networking.ClientTLSSettings {
	if s := portTLS(subset.GetTrafficPolicy(), port); s != nil {
		return s
	}
	return portTLS(dr.GetTrafficPolicy(), port)
}

// portTLS is a traffic policy's TLS for port: port-level first.
func portTLS(tp *networking.TrafficPolicy, port uint32) *networking.ClientTLSSettings {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port && pl.GetTls() != nil {
			return pl.GetTls()
		}
	}
	return tp.GetTls()
}
