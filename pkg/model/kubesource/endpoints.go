package kubesource

import (
	"cmp"
	"maps"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// workload is what an endpoint takes from its pod.
type workload struct {
	namespace      string
	serviceAccount string
	labels         map[string]string // a copy, shared by the pod's endpoints
	locality       string            // from the pod's labels
	nodeName       string
	network        string // the pod's network label, else its cluster's
	// placed is labels with the topology labels of its last locality
	// (topologyLabels), shared by the pod's endpoints while neither the
	// pod nor its node's locality changes.
	placed atomic.Pointer[placedLabels]
}

// podLookup finds and converts the pods of one build, and the nodes they
// run on, each once.
type podLookup struct {
	l     listers
	r     *reuse
	seen  map[string]*workload // by namespace/name/uid; nil: pod not known
	nodes map[string]nodeLoc   // by name
	rec   *lookups             // what the endpoints being made look up
}

func newPodLookup(l listers, r *reuse) *podLookup {
	return &podLookup{l: l, r: r, seen: make(map[string]*workload), nodes: make(map[string]nodeLoc)}
}

// workload is workloadOf(pod), made once while pod is unchanged.
func (p *podLookup) workload(pod *corev1.Pod) *workload {
	return p.r.workloads.get(pod, func() *workload { return p.r.topo.place(workloadOf(pod)) })
}

// anonymous is the workload of an endpoint no pod names: no identity, in
// namespace, of the source's cluster and network.
func (p *podLookup) anonymous(namespace string) *workload {
	return p.r.topo.place(&workload{namespace: namespace})
}

// topology is the cluster a source reads and that cluster's network.
type topology struct {
	cluster, network string
}

// place gives w the cluster and network labels, as Istio augments a
// workload's labels: the cluster's ID always, the network when the pod
// names none (its own label wins). Without a cluster ID w is unchanged.
func (t topology) place(w *workload) *workload {
	w.network = cmp.Or(w.labels[model.NetworkLabel], t.network)
	if t.cluster == "" {
		return w
	}
	if w.labels == nil {
		w.labels = make(map[string]string, 2)
	}
	w.labels[model.ClusterLabel] = t.cluster
	if w.network != "" {
		w.labels[model.NetworkLabel] = w.network
	}
	return w
}

// endpointsOf is svc's endpoints from its EndpointSlices: every address of
// every serving endpoint, for every service port the slice carries by name,
// sorted by address and port. An address that is an endpoint twice
// (overlapping slices) counts once. The pods and addresses it looks up are
// recorded in pods.rec.
func endpointsOf(svc *model.Service, slices []*discoveryv1.EndpointSlice, pods *podLookup) map[uint32][]model.Endpoint {
	out := make(map[uint32][]model.Endpoint, len(svc.Ports))
	size := 0 // an upper bound of each port's endpoints
	for _, s := range slices {
		for i := range s.Endpoints {
			size += len(s.Endpoints[i].Addresses)
		}
	}
	for _, s := range slices {
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue // as in Istio: a name is not an address
		}
		ports := portMap(svc, s)
		if len(ports) == 0 {
			continue
		}
		for i := range s.Endpoints {
			addEndpoint(out, size, ports, s.Namespace, &s.Endpoints[i], pods)
		}
	}
	for port, eps := range out {
		out[port] = dedupe(eps)
	}
	return out
}

// portMap pairs each service port with the port the slice gives its name.
func portMap(svc *model.Service, s *discoveryv1.EndpointSlice) [][2]uint32 {
	var out [][2]uint32
	for _, sp := range svc.Ports {
		for _, p := range s.Ports {
			if p.Port == nil || !validPort(*p.Port) || deref(p.Name) != sp.Name {
				continue
			}
			out = append(out, [2]uint32{sp.Port, uint32(*p.Port)})
			break
		}
	}
	return out
}

// addEndpoint adds e's addresses to out for each of ports; size is the
// capacity of a port's first slice.
func addEndpoint(out map[uint32][]model.Endpoint, size int, ports [][2]uint32, namespace string, e *discoveryv1.Endpoint, pods *podLookup) {
	if !serving(e) {
		return
	}
	w, ok := pods.byRef(namespace, e.TargetRef)
	if !ok {
		return
	}
	for _, addr := range e.Addresses {
		if addr == "" {
			continue
		}
		aw := w
		if aw == nil {
			aw = pods.byIP(namespace, addr)
		}
		locality, labels := pods.locality(aw, e), pods.topologyLabels(aw)
		for _, p := range ports {
			if out[p[0]] == nil {
				out[p[0]] = make([]model.Endpoint, 0, size)
			}
			out[p[0]] = append(out[p[0]], model.Endpoint{
				Address:        addr,
				Port:           p[1],
				Locality:       locality,
				ServiceAccount: aw.serviceAccount,
				Namespace:      aw.namespace,
				Labels:         labels,
				Weight:         1,
				Cluster:        pods.r.topo.cluster,
				Network:        aw.network,
			})
		}
	}
}

// serving is Istio's healthy: ready unset or true, and not terminating.
func serving(e *discoveryv1.Endpoint) bool {
	c := e.Conditions
	return (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

// byRef returns the workload of an endpoint's target. A target that is not
// a pod gives nil, true: the pod is then looked up by address. A pod target
// that is not known (the slice arrived first; it will come), of another
// namespace than the slice, or a different incarnation than the one named
// gives false: the endpoint is left out rather than given a wrong identity.
func (p *podLookup) byRef(namespace string, ref *corev1.ObjectReference) (*workload, bool) {
	if ref == nil || ref.Kind != "Pod" {
		return nil, true
	}
	if ref.Namespace != "" && ref.Namespace != namespace {
		return nil, false
	}
	p.rec.pods = append(p.rec.pods, namespace+"/"+ref.Name)
	key := namespace + "/" + ref.Name + "/" + string(ref.UID)
	w, seen := p.seen[key]
	if !seen {
		if pod, err := p.l.pods.Pods(namespace).Get(ref.Name); err == nil && (ref.UID == "" || ref.UID == pod.UID) {
			w = p.workload(pod)
		}
		p.seen[key] = w
	}
	return w, w != nil
}

// byIP returns the workload of the one live pod of namespace with address
// ip, or one without identity: no labels and no service account, as Istio
// gives an endpoint without a pod. Several pods with the address
// (host-network pods) name no one.
func (p *podLookup) byIP(namespace, ip string) *workload {
	p.rec.addrs = append(p.rec.addrs, namespace+"/"+ip)
	objs, _ := p.l.podIndex.ByIndex(podIPIndex, namespace+"/"+ip)
	var found *corev1.Pod
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if found != nil {
			return p.anonymous(namespace)
		}
		found = pod
	}
	if found == nil {
		return p.anonymous(namespace)
	}
	key := namespace + "/" + found.Name + "/" + string(found.UID)
	w, seen := p.seen[key]
	if !seen {
		w = p.workload(found)
		p.seen[key] = w
	}
	return w
}

// workloadOf copies what the model reads of pod. The apiserver defaults
// the service account to "default"; so does this.
func workloadOf(pod *corev1.Pod) *workload {
	return &workload{
		namespace:      pod.Namespace,
		serviceAccount: cmp.Or(pod.Spec.ServiceAccountName, "default"),
		labels:         maps.Clone(pod.Labels),
		locality:       podLocality(pod.Labels),
		nodeName:       pod.Spec.NodeName,
	}
}

// dedupe sorts eps by address and port and drops repeats, keeping the
// first of each, in slice name order.
func dedupe(eps []model.Endpoint) []model.Endpoint {
	slices.SortStableFunc(eps, compareEndpoints)
	return slices.CompactFunc(eps, func(a, b model.Endpoint) bool { return compareEndpoints(a, b) == 0 })
}

func compareEndpoints(a, b model.Endpoint) int {
	return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
