package model

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
)

// Defaults for a Snapshot built without explicit options.
const (
	DefaultDomain        = "cluster.local"
	DefaultRootNamespace = "istio-system"
	// TLSModeLabel marks a workload that accepts Istio mTLS when "istio".
	TLSModeLabel = "security.istio.io/tlsMode"
	// ClusterLabel names the cluster of an endpoint: sources add it to
	// the endpoint's labels, as Istio does, so that a DestinationRule
	// subset can select the endpoints of one cluster.
	ClusterLabel = "topology.istio.io/cluster"
	// NetworkLabel names the network of a workload (on a pod, or added by
	// the source from its cluster's network).
	NetworkLabel = "topology.istio.io/network"

	// The labels that place a workload, as Istio names them: a node's
	// region, zone and subzone (copied to a proxy's labels), its hostname,
	// and the pod labels that name a locality, the first present read.
	RegionLabel         = "topology.kubernetes.io/region"
	ZoneLabel           = "topology.kubernetes.io/zone"
	SubzoneLabel        = "topology.istio.io/subzone"
	HostnameLabel       = "kubernetes.io/hostname"
	LocalityLabel       = "topology.istio.io/locality"
	LegacyLocalityLabel = "istio-locality"
)

// Meta names a configuration object.
type Meta struct {
	Name      string
	Namespace string
}

// Service is a Kubernetes-style service.
type Service struct {
	Meta
	// Hostname is <name>.<namespace>.svc.<domain>.
	Hostname string
	// Addresses are the service's virtual IPs (a Kubernetes Service's
	// cluster IPs); none for a headless service.
	Addresses []string
	// Headless is a Service whose cluster IP is "None": clients connect
	// to its endpoints' own addresses.
	Headless bool
	Selector map[string]string
	Ports    []Port
	// ExportTo are the namespaces that see the service (its
	// networking.istio.io/exportTo annotation, see ParseExportTo); nil
	// leaves the mesh's defaultServiceExportTo in force.
	ExportTo []string
	// Endpoints are the service's workload instances by service port
	// number. A source may supply them (Kubernetes EndpointSlices); Build
	// adds the WorkloadEntries the selector matches and sorts them.
	Endpoints map[uint32][]Endpoint
	// Entry is set on a service made of a ServiceEntry host (its Meta is
	// the entry's, its Hostname the host); nil on a Kubernetes one.
	Entry *Entry
	// Exposures are, for each cluster where the Service has an ingress
	// address or names a network, what may make it a network gateway
	// (ComputeNetworkGateways); nil for most services.
	Exposures []Exposure
}

// Port is a service port.
type Port struct {
	Name       string
	Port       uint32
	TargetPort uint32 // 0 means Port, unless TargetPortName is set
	// TargetPortName is a named container port; the endpoints of a
	// Kubernetes Service resolve it.
	TargetPortName string
	Protocol       string
}

// Endpoint is one workload instance behind a service port.
type Endpoint struct {
	Address        string
	Port           uint32
	Locality       string
	ServiceAccount string
	Namespace      string
	Labels         map[string]string
	Weight         uint32
	// Cluster is the ID of the cluster the endpoint was read from; empty
	// when the source names none (the file model).
	Cluster string
	// Network is the endpoint's network: its pod's topology.istio.io/network
	// label, else its cluster's network; empty when unknown, which is
	// every network.
	Network string
}

// TLSMode is the endpoint's security.istio.io/tlsMode label.
func (e Endpoint) TLSMode() string { return e.Labels[TLSModeLabel] }

// Workload is one workload instance (a WorkloadEntry).
type Workload struct {
	Meta
	Spec *networkingv1.WorkloadEntry
}

// PeerAuthentication is a named PeerAuthentication.
type PeerAuthentication struct {
	Meta
	// Created is its creation time: of several policies of one scope,
	// the oldest applies. Zero when the source has none.
	Created time.Time
	Spec    *securityv1.PeerAuthentication
}

// RequestAuthentication is a named RequestAuthentication. The Envoy
// generator reads it; proxyless gRPC has no JWT filter.
type RequestAuthentication struct {
	Meta
	Spec *securityv1.RequestAuthentication
}

// AuthorizationPolicy is a named AuthorizationPolicy.
type AuthorizationPolicy struct {
	Meta
	Spec *securityv1.AuthorizationPolicy
}

// DestinationRule is a named DestinationRule.
type DestinationRule struct {
	Meta
	// Created is its creation time: of several rules for one host in one
	// namespace, the oldest one's traffic policy applies. Zero when the
	// source has none.
	Created time.Time
	Spec    *networkingv1.DestinationRule
	// From are the rules merged into this one, in order, when
	// DestinationRuleFor merged several rules for one host (Spec is then
	// the merge, Meta the first's); nil for a rule as written.
	From []Meta
}

// Gateway is a networking.istio.io Gateway: the servers a gateway pod
// (a router proxy) whose labels its selector matches listens with.
type Gateway struct {
	Meta
	// Created is its creation time: of conflicting servers, the oldest
	// Gateway's applies. Zero when the source has none.
	Created time.Time
	Spec    *networkingv1.Gateway
}

// VirtualService is a networking.istio.io VirtualService: routes for the
// hosts it names, bound to gateways by name or to sidecars ("mesh").
type VirtualService struct {
	Meta
	// Created is its creation time: of several services for one host,
	// the oldest applies. Zero when the source has none.
	Created time.Time
	Spec    *networkingv1.VirtualService
}

// Pod is a running pod of the registry: the workload a sidecar that names
// it serves.
type Pod struct {
	Meta
	UID            string
	ServiceAccount string
	Labels         map[string]string
	IPs            []string
	// Locality is "<region>/<zone>/<subzone>" of the pod's locality label,
	// else of its node's labels, as Istio's registry places a pod; "" when
	// neither places it (or its node is not known).
	Locality string
	// Network is the pod's network label, else its cluster's network; ""
	// for none.
	Network string
}

// Resources are the inputs of a Snapshot.
type Resources struct {
	Services  []*Service // Build adds selected Workloads to Endpoints
	Workloads []*Workload
	// Pods are the registry's pods, sorted by namespace and name; nil when
	// the source has no registry of pods (the file model), so that proxies
	// describe their workload themselves.
	Pods []*Pod
	// RemotePods are the pods of remote clusters' registries, by cluster
	// ID, each sorted by namespace and name (package clusters sets them):
	// where a proxy a remote cluster authenticated is looked up
	// (Snapshot.RemotePod). A cluster absent has no registry in the model.
	RemotePods             map[string][]*Pod
	PeerAuthentications    []*PeerAuthentication
	AuthorizationPolicies  []*AuthorizationPolicy
	RequestAuthentications []*RequestAuthentication
	DestinationRules       []*DestinationRule
	// Gateways and VirtualServices are sorted by namespace and name.
	Gateways        []*Gateway
	VirtualServices []*VirtualService
	// ServiceEntries are sorted by namespace and name. Each host of one
	// is a service of the snapshot (Snapshot.Services), unless a
	// Kubernetes service or an older entry has that hostname.
	ServiceEntries []*ServiceEntry
	// Telemetries are sorted by namespace and name.
	Telemetries []*Telemetry
	// Sidecars are sorted by namespace and name (SidecarFor chooses
	// among them).
	Sidecars []*Sidecar
}

// Options shape how a Snapshot reads its resources.
type Options struct {
	Domain        string // DNS domain of service hostnames
	RootNamespace string // namespace of mesh-wide policies
	// DefaultServiceExportTo and DefaultDestinationRuleExportTo are the
	// mesh's defaultServiceExportTo and defaultDestinationRuleExportTo,
	// comma-separated; empty is Istio's default, "*". Set them with
	// WithExportDefaults.
	DefaultServiceExportTo         string
	DefaultDestinationRuleExportTo string
}

// Snapshot is an immutable view of the mesh. Callers must not modify it or
// anything reachable from it.
type Snapshot struct {
	// Version identifies the content: equal versions mean equal content.
	Version string
	Options Options

	services []*Service // sorted by hostname
	hosts    *hostIndex // of services; shared by snapshots of the same hostnames
	res      Resources  // Pods sorted by namespace and name
	// clientSelected: a DestinationRule has a workloadSelector.
	clientSelected bool
	// rules index the DestinationRules under Options, once asked for.
	rules *lazyRules
	// exporting: a service has its own exportTo.
	exporting bool
	// entryNotes: ServiceEntry hosts left out (serviceentry.go).
	entryNotes []EntryNote
	// alternates are the services of ServiceEntries of other namespaces
	// for the hostname of a service, oldest first, by hostname without a
	// final dot (serviceentry.go, choose).
	alternates map[string][]*Service
	// sidecars index the Sidecars under Options, once asked for.
	sidecars *lazySidecars
	// gateways are the network gateways, once asked for.
	gateways *lazyGateways
	// shared are the values derived from the snapshot that generators
	// share across proxies (SharedValue).
	shared *sharedValues
}

// Services returns the services sorted by hostname.
func (s *Snapshot) Services() []*Service { return s.services }

// Service returns the service of hostname, or nil.
func (s *Snapshot) Service(hostname string) *Service {
	if i, ok := s.hosts.at[hostname]; ok {
		return s.services[i]
	}
	return nil
}

// hostIndex orders a list of services by hostname. Snapshots whose
// service lists name the same hostnames in the same order share one: a
// rebuild that changed only what some services hold (their endpoints)
// neither sorts nor indexes again.
type hostIndex struct {
	hostnames []string // of the list, in its order
	order     []int32  // the list's positions, by hostname
	at        map[string]int32
}

// indexHosts indexes svcs, or returns prev if it indexes the same
// hostnames in the same order.
func indexHosts(svcs []*Service, prev *hostIndex) *hostIndex {
	if prev != nil && len(prev.hostnames) == len(svcs) {
		same := true
		for i, svc := range svcs {
			if svc.Hostname != prev.hostnames[i] {
				same = false
				break
			}
		}
		if same {
			return prev
		}
	}
	x := &hostIndex{hostnames: make([]string, len(svcs)), order: make([]int32, len(svcs)), at: make(map[string]int32, len(svcs))}
	for i, svc := range svcs {
		x.hostnames[i], x.order[i] = svc.Hostname, int32(i)
	}
	slices.SortStableFunc(x.order, func(a, b int32) int { return cmp.Compare(x.hostnames[a], x.hostnames[b]) })
	for i, k := range x.order {
		x.at[x.hostnames[k]] = int32(i)
	}
	return x
}

// HasPods reports whether the source has a registry of pods, in which a
// sidecar's workload is looked up rather than taken from what it claims.
func (s *Snapshot) HasPods() bool { return s.res.Pods != nil }

// Pod returns the pod namespace/name of the registry, or nil.
func (s *Snapshot) Pod(namespace, name string) *Pod { return findPod(s.res.Pods, namespace, name) }

// Resources returns the snapshot's inputs.
func (s *Snapshot) Resources() *Resources { return &s.res }

// Build makes a snapshot of res. Each service keeps the endpoints it was
// given (nil means none) plus the WorkloadEntries of its namespace its
// selector matches, as Istio adds WorkloadEntries to Kubernetes Services;
// every port's endpoints are sorted by address and port. It takes ownership
// of res.
func Build(version string, opts Options, res Resources) *Snapshot {
	opts = opts.WithDefaults()
	for _, svc := range res.Services {
		svc.Hostname = opts.Hostname(svc.Namespace, svc.Name)
		svc.Endpoints = endpointsOf(svc, res.Workloads)
	}
	if !slices.IsSortedFunc(res.Telemetries, compareTelemetries) {
		res.Telemetries = slices.Clone(res.Telemetries)
		slices.SortStableFunc(res.Telemetries, compareTelemetries)
	}
	if !slices.IsSortedFunc(res.Pods, comparePods) {
		res.Pods = slices.Clone(res.Pods)
		slices.SortStableFunc(res.Pods, comparePods)
	}
	return assemble(version, opts, res, nil)
}

func comparePods(a, b *Pod) int { return byMeta(a.Meta, b.Meta) }

func compareTelemetries(a, b *Telemetry) int { return byMeta(a.Meta, b.Meta) }

// byMeta orders by namespace, then name.
func byMeta(a, b Meta) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// BuildShared makes a snapshot of res whose services are complete: each
// has its hostname under opts and its endpoints sorted by address and
// port (SortEndpoints), whose pods are sorted by namespace and name, and
// which has no WorkloadEntries. It changes nothing it is given, so that
// successive snapshots can share the services that did not change; Diff
// then tells them apart by pointer. prev, when not nil, is the snapshot
// the source built before: what res keeps of it is not indexed again.
func BuildShared(version string, opts Options, res Resources, prev *Snapshot) *Snapshot {
	return assemble(version, opts.WithDefaults(), res, prev)
}

func assemble(version string, opts Options, res Resources, prev *Snapshot) *Snapshot {
	s := &Snapshot{Version: version, Options: opts, res: res, rules: &lazyRules{}, sidecars: &lazySidecars{}, gateways: &lazyGateways{}, shared: &sharedValues{}}
	s.clientSelected = slices.ContainsFunc(res.DestinationRules, func(dr *DestinationRule) bool {
		return dr.Spec.GetWorkloadSelector() != nil
	})
	var prevHosts *hostIndex
	if prev != nil {
		prevHosts = prev.hosts
	}
	all := res.Services
	if len(res.ServiceEntries) > 0 {
		entries, alternates, notes := entryServices(res.ServiceEntries, res.Services, opts.Domain, res.Workloads, res.Pods)
		s.entryNotes = notes
		all = append(slices.Clip(res.Services), entries...)
		for _, a := range alternates {
			if s.alternates == nil {
				s.alternates = map[string][]*Service{}
			}
			h := strings.TrimSuffix(a.Hostname, ".")
			s.alternates[h] = append(s.alternates[h], a)
		}
	}
	s.exporting = len(s.alternates) > 0 || slices.ContainsFunc(all, func(svc *Service) bool { return len(svc.ExportTo) > 0 })
	s.hosts = indexHosts(all, prevHosts)
	s.services = make([]*Service, len(all))
	for i, k := range s.hosts.order {
		s.services[i] = all[k]
	}
	return s
}

// WithDefaults is o with DefaultDomain and DefaultRootNamespace where o
// leaves them empty.
func (o Options) WithDefaults() Options {
	o.Domain = cmp.Or(o.Domain, DefaultDomain)
	o.RootNamespace = cmp.Or(o.RootNamespace, DefaultRootNamespace)
	return o
}

// Hostname is the hostname of the service name in namespace:
// <name>.<namespace>.svc.<domain>.
func (o Options) Hostname(namespace, name string) string {
	return name + "." + namespace + ".svc." + o.Domain
}

// WithRootNamespace returns s as seen with ns as the root namespace (the
// namespace of mesh-wide policies, which the mesh configuration names):
// s itself when it already is, else a copy sharing s's resources, whose
// version tells the two apart. An empty ns keeps s's.
func (s *Snapshot) WithRootNamespace(ns string) *Snapshot {
	if ns == "" || ns == s.Options.RootNamespace {
		return s
	}
	c := *s
	c.Options.RootNamespace = ns
	c.rules = &lazyRules{}
	c.sidecars = &lazySidecars{}
	c.shared = &sharedValues{}
	if s.Version != "" {
		c.Version = s.Version + "+root:" + ns
	}
	return &c
}

// endpointsOf adds to svc's own endpoints the workloads of its namespace
// that its selector matches. A service without a selector selects none.
func endpointsOf(svc *Service, workloads []*Workload) map[uint32][]Endpoint {
	out := svc.Endpoints
	if out == nil {
		out = make(map[uint32][]Endpoint, len(svc.Ports))
	}
	defer SortEndpoints(out)
	if len(svc.Selector) == 0 {
		return out
	}
	for _, w := range workloads {
		if w.Namespace != svc.Namespace || !Matches(svc.Selector, w.Spec.GetLabels()) {
			continue
		}
		for _, p := range svc.Ports {
			port := p.TargetPort
			if port == 0 {
				port = p.Port
			}
			if wp, ok := w.Spec.GetPorts()[p.Name]; ok && p.Name != "" {
				port = wp
			}
			out[p.Port] = append(out[p.Port], Endpoint{
				Address:        w.Spec.GetAddress(),
				Port:           port,
				Locality:       w.Spec.GetLocality(),
				ServiceAccount: cmp.Or(w.Spec.GetServiceAccount(), "default"),
				Namespace:      w.Namespace,
				Labels:         maps.Clone(w.Spec.GetLabels()),
				Weight:         w.Spec.GetWeight(),
			})
		}
	}
	return out
}

// SortEndpoints sorts each port's endpoints by address and port, keeping
// the order of equal ones.
func SortEndpoints(eps map[uint32][]Endpoint) {
	for port := range eps {
		slices.SortStableFunc(eps[port], func(a, b Endpoint) int {
			return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
		})
	}
}

// Matches reports whether labels carry every key/value of selector. An empty
// selector matches everything.
func Matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// GetSpec returns the rule's spec; nil for a nil rule.
func (d *DestinationRule) GetSpec() *networkingv1.DestinationRule {
	if d == nil {
		return nil
	}
	return d.Spec
}
