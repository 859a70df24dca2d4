package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// ServiceEntry is a networking.istio.io ServiceEntry: hosts the registry
// does not hold, added to it. Each host becomes a Service of the snapshot
// (Snapshot.Services), its Entry saying how it differs from a Kubernetes
// one.
type ServiceEntry struct {
	Meta
	// Created is its creation time: of several entries for one host, the
	// oldest applies. Zero when the source has none.
	Created time.Time
	Spec    *networkingv1.ServiceEntry
}

// Entry marks a Service made of a ServiceEntry host, as Istio's
// serviceentry registry converts it.
type Entry struct {
	// External is location MESH_EXTERNAL: its endpoints are outside the
	// mesh, so auto-mTLS never applies to them.
	External bool
	// Resolution is how a client finds the endpoints: NONE (the
	// connection's original destination), STATIC (the endpoints, over
	// EDS), DNS (every address the endpoints' names resolve to),
	// DNS_ROUND_ROBIN (the first name's, one at a time).
	Resolution networkingv1.ServiceEntry_Resolution
	// SubjectAltNames are the identities its servers may present, beside
	// those of its endpoints' service accounts. (Its exportTo is the
	// service's ExportTo.)
	SubjectAltNames []string
	// TargetPorts are the ports' targetPorts by port number, for a NONE
	// entry: the port the original destination is rewritten to.
	TargetPorts map[uint32]uint32
}

// Wildcard reports whether host is a wildcard one, "*.example.com".
func Wildcard(host string) bool { return len(host) > 0 && host[0] == '*' }

func sameEntry(a, b *Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.External == b.External && a.Resolution == b.Resolution && slices.Equal(a.SubjectAltNames, b.SubjectAltNames) &&
		maps.Equal(a.TargetPorts, b.TargetPorts)
}

// entryServices converts entries into services, one per host and
// namespace, as Istio's registry and sidecar scopes hold them:
//   - the first of a host (the oldest entry, then by name and namespace)
//     is the snapshot's service of that hostname, unless a Kubernetes
//     service has it;
//   - an entry of another namespace for a host taken is an alternative
//     (alternates): Istio lets the sidecars of that namespace, and those
//     it exports the host to, see it instead (Snapshot.choose);
//   - a host a Kubernetes service or an older entry of the same namespace
//     has, or one a Kubernetes service answers to by a short name
//     ("name.namespace[.svc]", "name": a route takes a name once), is left
//     out and noted.
//
// Endpoints are the entry's own, else the WorkloadEntries and pods of its
// namespace its workloadSelector matches, else, for DNS resolution, the
// host itself.
//
// What Envoy would refuse is left out, so that one entry cannot make the
// configuration of every sidecar fail (policy.ValidateServiceEntry says
// why, the webhook refuses it, the reporter reports it): a host that is not
// a (wildcard) DNS name, a port out of range or of a number already
// listed, an address a service or an older entry (or host) already has,
// an endpoint that is not an IP address where no DNS resolves it.
//
// The hosts left out because another service has them are returned as
// notes, for the server to report: validation cannot see them, as they
// depend on other objects.
func entryServices(entries []*ServiceEntry, k8s []*Service, domain string, workloads []*Workload, pods []*Pod) (primary, alternates []*Service, notes []EntryNote) {
	if len(entries) == 0 {
		return nil, nil, nil
	}
	// short are the names Kubernetes services answer to besides their
	// hostnames; owner the namespace of each hostname's service, and
	// taken the namespaces that have a service of each hostname.
	short, owner, taken, firstOf := map[string]bool{}, map[string]string{}, map[string]bool{}, map[string]bool{}
	slot := map[string]*Service{} // the service of each host and namespace (entrymerge.go)
	addrsTaken := map[string]bool{}
	for _, svc := range k8s {
		s := strings.TrimSuffix(svc.Hostname, ".svc."+domain)
		short[s], short[s+".svc"], short[svc.Name] = true, true, true
		owner[svc.Hostname] = svc.Namespace
		for _, a := range svc.Addresses {
			addrsTaken[a] = true
		}
	}
	order := slices.Clone(entries)
	slices.SortStableFunc(order, func(a, b *ServiceEntry) int { return compareCreated(a.Meta, a.Created, b.Meta, b.Created) })
	for _, se := range order {
		spec := se.Spec
		ports := entryPorts(spec)
		entry := &Entry{
			External:        spec.GetLocation() == networkingv1.ServiceEntry_MESH_EXTERNAL,
			Resolution:      spec.GetResolution(),
			SubjectAltNames: slices.Clone(spec.GetSubjectAltNames()),
		}
		if entry.Resolution == networkingv1.ServiceEntry_NONE {
			for _, p := range spec.GetPorts() {
				if p.GetTargetPort() != 0 {
					if entry.TargetPorts == nil {
						entry.TargetPorts = map[uint32]uint32{}
					}
					entry.TargetPorts[p.GetNumber()] = p.GetTargetPort()
				}
			}
		}
		addrs := entryAddresses(spec.GetAddresses())
		for _, host := range spec.GetHosts() {
			// "*" would claim every name, and Istio's validation refuses it.
			if host == "*" || !validEntryHost(host) {
				continue
			}
			name := strings.TrimSuffix(host, ".")
			_, k8sHost := owner[name]
			switch {
			case !k8sHost && (short[host] || short[name]):
				notes = append(notes, EntryNote{Entry: se.Meta, Host: host, Reason: "a Kubernetes service answers to it"})
				continue
			case k8sHost && owner[name] == se.Namespace:
				notes = append(notes, EntryNote{Entry: se.Meta, Host: host, Reason: "a Kubernetes service of its namespace has it"})
				continue
			case taken[name+"/"+se.Namespace]:
				if !mergeEntry(slot[name+"/"+se.Namespace], se, ports, entryEndpoints(se, host, ports, workloads, pods)) {
					notes = append(notes, EntryNote{Entry: se.Meta, Host: host, Reason: "an older ServiceEntry of its namespace has it"})
				}
				continue
			}
			first := !k8sHost && !firstOf[name]
			firstOf[name] = true
			taken[name+"/"+se.Namespace] = true
			// The entry's addresses go to its first host a namespace sees
			// first (an alternative takes those still free without taking
			// them from the hosts after it): a route names an address once.
			var own []string
			for _, a := range addrs {
				if !addrsTaken[a] {
					addrsTaken[a] = first
					own = append(own, a)
				}
			}
			// The workloads the selector picks serve the entry's ports, as
			// a Kubernetes service's pods do theirs.
			svc := &Service{Meta: se.Meta, Hostname: host, Addresses: own, Ports: ports, Entry: entry,
				Selector: maps.Clone(spec.GetWorkloadSelector().GetLabels()), ExportTo: slices.Clone(spec.GetExportTo())}
			svc.Endpoints = entryEndpoints(se, host, ports, workloads, pods)
			slot[name+"/"+se.Namespace] = svc
			if first {
				primary = append(primary, svc)
			} else {
				alternates = append(alternates, svc)
			}
		}
	}
	// Sorted once the entries merged into them have added theirs.
	for _, svc := range slot {
		SortEndpoints(svc.Endpoints)
	}
	return primary, alternates, notes
}

// EntryNote is a host of a ServiceEntry left out because another service
// has it: a Kubernetes service of the entry's namespace, or one that
// answers to it by a short name, or an older ServiceEntry of the same
// namespace.
type EntryNote struct {
	Entry  Meta
	Host   string
	Reason string
}

func (n EntryNote) String() string {
	return fmt.Sprintf("ServiceEntry %s/%s: host %s left out: %s", n.Entry.Namespace, n.Entry.Name, n.Host, n.Reason)
}

// ServiceEntryNotes returns the ServiceEntry hosts the snapshot leaves out.
func (s *Snapshot) ServiceEntryNotes() []EntryNote { return s.entryNotes }

func entryPorts(spec *networkingv1.ServiceEntry) []Port {
	out := make([]Port, 0, len(spec.GetPorts()))
	for _, p := range spec.GetPorts() {
		n := p.GetNumber()
		if n == 0 || n > maxPort || p.GetTargetPort() > maxPort || slices.ContainsFunc(out, func(q Port) bool { return q.Port == n }) {
			continue
		}
		out = append(out, Port{Name: p.GetName(), Port: n, TargetPort: p.GetTargetPort(), Protocol: p.GetProtocol()})
	}
	return out
}

const maxPort = 65535

// entryHostRE is a DNS name whose first label may be a wildcard ("*",
// "*foo", "*-foo"), as Istio's ValidateWildcardDomain takes it.
var entryHostRE = regexp.MustCompile(`^(?:\*|(?:\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*\.?$`)

func validEntryHost(h string) bool { return len(h) <= 255 && entryHostRE.MatchString(h) }

// entryAddresses are the IP addresses of an entry, a /32 (or /128) CIDR
// as its address; other CIDRs are not (yet) listened on.
func entryAddresses(in []string) []string {
	var out []string
	for _, a := range in {
		if ip, err := netip.ParseAddr(a); err == nil {
			out = append(out, ip.String())
		} else if p, err := netip.ParsePrefix(a); err == nil && p.Bits() == p.Addr().BitLen() {
			out = append(out, p.Addr().String())
		}
	}
	return out
}

// entryEndpoints are the endpoints of an entry's host by port number, as
// Istio's convertServiceEntryToInstances makes them.
func entryEndpoints(se *ServiceEntry, host string, ports []Port, workloads []*Workload, pods []*Pod) map[uint32][]Endpoint {
	spec := se.Spec
	out := make(map[uint32][]Endpoint, len(ports))
	target := func(p Port, named map[string]uint32) uint32 {
		if n, ok := named[p.Name]; ok && n > 0 && n <= maxPort {
			return n
		}
		return cmp.Or(p.TargetPort, p.Port)
	}
	dns := spec.GetResolution() == networkingv1.ServiceEntry_DNS || spec.GetResolution() == networkingv1.ServiceEntry_DNS_ROUND_ROBIN
	switch {
	case len(spec.GetEndpoints()) > 0:
		for _, we := range spec.GetEndpoints() {
			// EDS takes IP addresses alone; DNS resolves names too.
			if _, err := netip.ParseAddr(we.GetAddress()); err != nil && (!dns || !validEntryHost(we.GetAddress()) || Wildcard(we.GetAddress())) {
				continue
			}
			for _, p := range ports {
				out[p.Port] = append(out[p.Port], workloadEndpoint(we, se.Namespace, target(p, we.GetPorts())))
			}
		}
	case spec.GetWorkloadSelector() != nil:
		sel := spec.GetWorkloadSelector().GetLabels()
		for _, w := range workloads {
			if w.Namespace != se.Namespace || !Matches(sel, w.Spec.GetLabels()) {
				continue
			}
			for _, p := range ports {
				out[p.Port] = append(out[p.Port], workloadEndpoint(w.Spec, se.Namespace, target(p, w.Spec.GetPorts())))
			}
		}
		for _, pod := range pods {
			if pod.Namespace != se.Namespace || len(pod.IPs) == 0 || !Matches(sel, pod.Labels) {
				continue
			}
			for _, p := range ports {
				out[p.Port] = append(out[p.Port], Endpoint{
					Address: pod.IPs[0], Port: target(p, nil), ServiceAccount: cmp.Or(pod.ServiceAccount, "default"),
					Namespace: pod.Namespace, Labels: maps.Clone(pod.Labels),
				})
			}
		}
	case dns && !Wildcard(host):
		for _, p := range ports {
			out[p.Port] = append(out[p.Port], Endpoint{Address: host, Port: target(p, nil), Namespace: se.Namespace})
		}
	}
	return out
}

// workloadEndpoint is a WorkloadEntry (or an entry's inline endpoint) as an
// endpoint of port: its tlsMode is its label's, else "istio" when it names
// a service account, as Istio's getTLSModeFromWorkloadEntry.
func workloadEndpoint(we *networkingv1.WorkloadEntry, namespace string, port uint32) Endpoint {
	labels := maps.Clone(we.GetLabels())
	if _, ok := labels[TLSModeLabel]; !ok && we.GetServiceAccount() != "" {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[TLSModeLabel] = "istio"
	}
	return Endpoint{
		Address: we.GetAddress(), Port: port, Locality: we.GetLocality(), ServiceAccount: we.GetServiceAccount(),
		Namespace: namespace, Labels: labels, Weight: we.GetWeight(),
	}
}

// ServiceEntries returns the ServiceEntries, sorted by namespace and name.
func (s *Snapshot) ServiceEntries() []*ServiceEntry { return s.res.ServiceEntries }

// Parts of a ServiceEntry count its creation time: of several entries
// for one host, the oldest applies.
func (e *ServiceEntry) Parts() (Meta, proto.Message) { return createdParts(e.Meta, e.Created), e.Spec }

// GetTargetPorts returns e's TargetPorts; nil for a nil Entry.
func (e *Entry) GetTargetPorts() map[uint32]uint32 {
	if e == nil {
		return nil
	}
	return e.TargetPorts
}
