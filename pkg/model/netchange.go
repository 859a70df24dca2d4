package model

// GatewayChangedHosts are the hostnames of the services of s whose load
// assignments may differ between network gateways a and b (split-horizon
// EDS): none when a and b are the same gateways; every service with
// endpoints when whether any network has a gateway, or the scale of
// endpoint weights, differs; else every service with an endpoint on a
// network. The result is sorted as the services are.
func (s *Snapshot) GatewayChangedHosts(a, b *NetworkGateways) []string {
	if a.Enabled() == b.Enabled() && (!a.Enabled() || a.Key == b.Key) {
		return nil
	}
	every := a.Enabled() != b.Enabled() || a.ScaleFactor() != b.ScaleFactor()
	var out []string
	for _, svc := range s.services {
		if every && hasEndpoints(svc) || !every && hasNetworkEndpoints(svc) {
			out = append(out, svc.Hostname)
		}
	}
	return out
}

func hasEndpoints(svc *Service) bool {
	for _, eps := range svc.Endpoints {
		if len(eps) > 0 {
			return true
		}
	}
	return false
}
