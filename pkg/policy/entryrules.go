package policy

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// Limits on a ServiceEntry: what one object may make the generators build.
const (
	MaxEntryAddresses = 256
	MaxEntryPorts     = 256
	MaxEntryEndpoints = 4096
)

// labelAutoallocate opts a ServiceEntry out of Istio's address allocation.
const labelAutoallocate = "networking.istio.io/enable-autoallocate-ip"

// ValidateServiceEntry checks a networking.istio.io ServiceEntry of
// namespace with labels as Istio's validation does (pkg/config/validation
// ValidateServiceEntry), and within this package's limits. Errors refuse
// it; warnings are Istio's.
func ValidateServiceEntry(namespace string, labels map[string]string, spec *networking.ServiceEntry) Findings {
	var f Findings
	checkEntrySelector(&f, spec.GetWorkloadSelector())
	if spec.GetWorkloadSelector() != nil && spec.GetEndpoints() != nil {
		f.errorf("spec", "only one of workloadSelector and endpoints may be set")
	}
	hosts := spec.GetHosts()
	switch {
	case len(hosts) == 0:
		f.errorf("spec.hosts", "a ServiceEntry needs at least one host")
	case len(hosts) > MaxHosts:
		f.errorf("spec.hosts", "%d hosts, more than %d", len(hosts), MaxHosts)
		return f
	}
	for i, h := range hosts {
		if h == "*" {
			f.errorf(at("spec.hosts", i), "the host * would take every name")
			continue
		}
		f.check(at("spec.hosts", i), checkWildcardName(h))
		if spec.GetResolution() != networking.ServiceEntry_DYNAMIC_DNS {
			if msg := checkPartialWildcard(h); msg != "" {
				f.warnf(at("spec.hosts", i), "%s", msg)
			}
		}
	}
	if len(spec.GetAddresses()) > MaxEntryAddresses || len(spec.GetPorts()) > MaxEntryPorts || len(spec.GetEndpoints()) > MaxEntryEndpoints {
		f.errorf("spec", "more than %d addresses, %d ports or %d endpoints", MaxEntryAddresses, MaxEntryPorts, MaxEntryEndpoints)
		return f
	}
	cidr := false
	for i, a := range spec.GetAddresses() {
		cidr = cidr || strings.Contains(a, "/")
		f.check(at("spec.addresses", i), checkIPOrCIDR(a))
	}
	if cidr && spec.GetResolution() != networking.ServiceEntry_NONE && spec.GetResolution() != networking.ServiceEntry_STATIC {
		f.errorf("spec.addresses", "CIDR addresses are allowed only with resolution NONE or STATIC")
	}
	portNames := checkEntryPorts(&f, labels, spec)
	checkResolution(&f, spec, portNames)
	// Plain TCP cannot tell several hosts apart; HTTP (the Host header)
	// and TLS (SNI) can, and NONE ignores the hosts.
	if spec.GetResolution() != networking.ServiceEntry_NONE && len(hosts) > 1 {
		for _, p := range spec.GetPorts() {
			if p != nil && !isHTTP(p.GetProtocol()) && !isTLS(p.GetProtocol()) {
				f.errorf("spec.ports", "several hosts with a port neither HTTP nor TLS")
				break
			}
		}
	}
	checkEntryExportTo(&f, namespace, spec.GetExportTo())
	return f
}

// checkEntrySelector checks a workloadSelector as Istio's
// ValidateAlphaWorkloadSelector does.
func checkEntrySelector(f *Findings, sel *networking.WorkloadSelector) {
	if sel == nil {
		return
	}
	for _, k := range sortedKeys(sel.GetLabels()) {
		v := sel.GetLabels()[k]
		switch {
		case k == "":
			f.errorf("spec.workloadSelector.labels", "an empty key is not supported")
		case strings.Contains(k, "*") || strings.Contains(v, "*"):
			f.errorf(key("spec.workloadSelector.labels", k), "a wildcard is not supported")
		}
	}
	if len(sel.GetLabels()) == 0 {
		f.warnf("spec.workloadSelector", "no labels: it selects every workload of the namespace")
	}
}

// checkEntryPorts checks the ports and returns their names.
func checkEntryPorts(f *Findings, labels map[string]string, spec *networking.ServiceEntry) map[string]bool {
	// Istio allocates addresses to an entry without any, unless its
	// resolution is NONE or its label opts out: only then does a TCP
	// port without an address earn its warning.
	autoAllocated := spec.GetResolution() != networking.ServiceEntry_NONE && !strings.EqualFold(labels[labelAutoallocate], "false")
	names := map[string]bool{}
	numbers := map[uint32]bool{}
	for i, p := range spec.GetPorts() {
		path := at("spec.ports", i)
		if p == nil {
			f.errorf(path, "must not be null")
			continue
		}
		if names[p.GetName()] {
			f.errorf(path+".name", "%s names another port", quote(p.GetName()))
		}
		names[p.GetName()] = true
		if numbers[p.GetNumber()] {
			f.errorf(path+".number", "port %d is defined twice", p.GetNumber())
		}
		numbers[p.GetNumber()] = true
		if p.GetTargetPort() != 0 {
			f.check(path+".targetPort", checkPort(int64(p.GetTargetPort())))
		}
		if len(spec.GetAddresses()) == 0 && !autoAllocated && (p.GetProtocol() == "" || p.GetProtocol() == "TCP") {
			f.warnf(path, "a TCP (or undeclared) port needs addresses when they are not allocated")
		}
		if !isDNSLabel(p.GetName()) {
			f.errorf(path+".name", "%s is not a DNS label", quote(p.GetName()))
		}
		if p.GetProtocol() != "" && !knownProtocol(p.GetProtocol()) {
			f.errorf(path+".protocol", "unsupported protocol %s", quote(p.GetProtocol()))
		}
		f.check(path+".number", checkPort(int64(p.GetNumber())))
	}
	return names
}

// checkResolution checks what the resolution asks of the endpoints.
func checkResolution(f *Findings, spec *networking.ServiceEntry, portNames map[string]bool) {
	switch r := spec.GetResolution(); r {
	case networking.ServiceEntry_NONE:
		if len(spec.GetEndpoints()) != 0 {
			f.errorf("spec.endpoints", "resolution NONE takes no endpoints")
		}
		if spec.GetWorkloadSelector() != nil {
			f.warnf("spec.workloadSelector", "has no effect with resolution NONE")
		}
	case networking.ServiceEntry_STATIC:
		for i, ep := range spec.GetEndpoints() {
			checkEntryEndpoint(f, at("spec.endpoints", i), ep, portNames, false)
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(spec.GetEndpoints()) == 0 {
			for i, h := range spec.GetHosts() {
				if msg := checkDNSName(h); msg != "" {
					f.errorf(at("spec.hosts", i), "resolution %s without endpoints resolves the hosts, which must be names: %s", r, msg)
					break
				}
			}
		}
		if r == networking.ServiceEntry_DNS_ROUND_ROBIN && len(spec.GetEndpoints()) > 1 {
			f.errorf("spec.endpoints", "resolution DNS_ROUND_ROBIN takes at most one endpoint")
		}
		for i, ep := range spec.GetEndpoints() {
			checkEntryEndpoint(f, at("spec.endpoints", i), ep, portNames, true)
		}
		if len(spec.GetAddresses()) > 0 && len(spec.GetHosts()) > 1 {
			for _, p := range spec.GetPorts() {
				if p != nil && isTCPProtocol(p.GetProtocol()) {
					f.warnf("spec.hosts", "several hosts with an address and a TCP port")
					break
				}
			}
		}
	case networking.ServiceEntry_DYNAMIC_DNS:
		for i, h := range spec.GetHosts() {
			if !strings.HasPrefix(h, "*") {
				f.errorf(at("spec.hosts", i), "resolution DYNAMIC_DNS takes wildcard hosts")
			}
		}
		if len(spec.GetAddresses()) != 0 {
			f.errorf("spec.addresses", "resolution DYNAMIC_DNS takes no addresses")
		}
		if len(spec.GetEndpoints()) != 0 {
			f.errorf("spec.endpoints", "resolution DYNAMIC_DNS takes no endpoints")
		}
		for i, p := range spec.GetPorts() {
			switch strings.ToLower(p.GetProtocol()) {
			case "http", "tls", "grpc", "http2":
			default:
				f.errorf(at("spec.ports", i)+".protocol", "resolution DYNAMIC_DNS takes HTTP, TLS, GRPC and HTTP2 ports")
			}
		}
	default:
		f.errorf("spec.resolution", "unsupported resolution %s", r)
	}
}

// isTCPProtocol is Istio's protocol.IsTCP: the protocols proxied as
// opaque TCP.
func isTCPProtocol(p string) bool {
	switch strings.ToLower(p) {
	case "tcp", "https", "tls", "mongo", "redis", "mysql":
		return true
	}
	return false
}

// checkEntryEndpoint checks an inline endpoint as Istio's
// validateWorkloadEntry does: an IP address, or under DNS resolution a
// name; ports the entry names; labels.
func checkEntryEndpoint(f *Findings, path string, ep *networking.WorkloadEntry, portNames map[string]bool, names bool) {
	if ep == nil {
		f.errorf(path, "must not be null")
		return
	}
	addr := ep.GetAddress()
	switch {
	case addr == "" && ep.GetNetwork() == "":
		f.errorf(path+".address", "an address is required")
	case addr == "":
		f.warnf(path+".address", "unset with network %s", quote(ep.GetNetwork()))
	case strings.HasPrefix(addr, "unix://"):
		f.errorf(path+".address", "unix domain socket endpoints are not supported")
	case isIP(addr):
	case !names:
		f.errorf(path+".address", "%s is not an IP address", quote(addr))
	default:
		if msg := checkDNSName(addr); msg != "" {
			f.errorf(path+".address", "%s is neither an IP address nor a name: %s", quote(addr), msg)
		}
	}
	for _, name := range sortedKeys(ep.GetPorts()) {
		if !portNames[name] {
			f.errorf(key(path+".ports", name), "the entry has no port named %s", quote(name))
		}
		if !isDNSLabel(name) {
			f.errorf(key(path+".ports", name), "%s is not a DNS label", quote(name))
		}
		f.check(key(path+".ports", name), checkPort(int64(ep.GetPorts()[name])))
	}
	checkLabels(f, path+".labels", ep.GetLabels())
}

// checkEntryExportTo checks exportTo as Istio does for a ServiceEntry:
// as a VirtualService's, and "~" (no one) allowed alone.
func checkEntryExportTo(f *Findings, namespace string, exportTo []string) {
	var rest []string
	for _, e := range exportTo {
		if e != "~" {
			rest = append(rest, e)
		}
	}
	if len(rest) < len(exportTo) {
		if len(exportTo) > 1 {
			f.errorf("spec.exportTo", "~ (no one) cannot be listed with others")
		}
		if len(exportTo)-len(rest) > 1 {
			f.errorf("spec.exportTo", "~ is exported to twice")
		}
	}
	checkExportTo(f, "spec.exportTo", namespace, rest)
}
