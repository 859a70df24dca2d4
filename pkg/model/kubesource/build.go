package kubesource

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// build converts the caches' content into a snapshot whose version is the
// hash of that content. It copies everything it keeps: the snapshot shares
// nothing with the caches.
func build(l listers, opts model.Options) *model.Snapshot {
	return buildReusing(l, opts, &reuse{}, &touched{})
}

// buildReusing is build, keeping what the last rebuild made (r) of what
// the informers' events since then (t) did not touch. Snapshots share
// those: nothing changes them.
func buildReusing(l listers, opts model.Options, r *reuse, t *touched) *model.Snapshot {
	opts = opts.WithDefaults()
	all := t.all || !r.built || r.opts != opts
	r.built, r.opts = true, opts
	pods := newPodLookup(l, r)
	defer r.workloads.done()
	t.staleServices(r.services.items)
	if r.services.update(r.serviceSource(l, pods, opts), all, t.services) || r.serviceList == nil {
		r.serviceList = make([]*model.Service, len(r.services.items))
		for i, e := range r.services.items {
			r.serviceList[i] = e.svc
		}
	}
	r.stalePods(pods, all || t.nodes, t)
	r.pods.update(podSource(l, pods), all, t.pods)
	r.peerAuthn.update(policySource(l.peerAuthn.List, l.peerAuthn.PeerAuthentications, peerAuthnOf,
		(*model.PeerAuthentication).Parts), all, t.peerAuthn)
	r.authz.update(policySource(l.authz.List, l.authz.AuthorizationPolicies, authzOf,
		(*model.AuthorizationPolicy).Parts), all, t.authz)
	r.reqAuthn.update(policySource(l.requestAuthn.List, l.requestAuthn.RequestAuthentications, reqAuthnOf,
		(*model.RequestAuthentication).Parts), all, t.reqAuthn)
	r.destRules.update(policySource(l.destRules.List, l.destRules.DestinationRules, destRuleOf,
		(*model.DestinationRule).Parts), all, t.destRules)
	r.gateways.update(policySource(l.gateways.List, l.gateways.Gateways, gatewayOf,
		(*model.Gateway).Parts), all, t.gateways)
	r.virtualSvcs.update(policySource(l.virtualServices.List, l.virtualServices.VirtualServices, virtualServiceOf,
		(*model.VirtualService).Parts), all, t.virtualSvcs)
	r.svcEntries.update(policySource(l.serviceEntries.List, l.serviceEntries.ServiceEntries, serviceEntryOf,
		(*model.ServiceEntry).Parts), all, t.svcEntries)
	r.telemetries.update(policySource(l.telemetries.List, l.telemetries.Telemetries, telemetryOf,
		(*model.Telemetry).Parts), all, t.telemetries)
	r.sidecars.update(policySource(l.sidecars.List, l.sidecars.Sidecars, sidecarOf,
		(*model.Sidecar).Parts), all, t.sidecars)
	res := model.Resources{
		Services:               r.serviceList,
		Pods:                   r.pods.items,
		PeerAuthentications:    r.peerAuthn.items,
		AuthorizationPolicies:  r.authz.items,
		RequestAuthentications: r.reqAuthn.items,
		DestinationRules:       r.destRules.items,
		Gateways:               r.gateways.items,
		VirtualServices:        r.virtualSvcs.items,
		ServiceEntries:         r.svcEntries.items,
		Telemetries:            r.telemetries.items,
		Sidecars:               r.sidecars.items,
	}
	if res.Pods == nil {
		res.Pods = []*model.Pod{} // a registry, even when empty
	}
	r.last = model.BuildShared(r.version(), opts, res, r.last)
	return r.last
}

// serviceSource makes the entries of Services, with their endpoints.
func (r *reuse) serviceSource(l listers, pods *podLookup, opts model.Options) kindSource[*corev1.Service, *serviceEntry] {
	return kindSource[*corev1.Service, *serviceEntry]{
		list: func() []*corev1.Service { return list(l.services.List) },
		get: func(ns, name string) (*corev1.Service, bool) {
			k, err := l.services.Services(ns).Get(name)
			return k, err == nil
		},
		key: func(k *corev1.Service) string { return k.Namespace + "/" + k.Name },
		make: func(k *corev1.Service) (*serviceEntry, bool) {
			return makeService(k, slicesOf(l, k.Namespace, k.Name), pods, opts), true
		},
		digest: func(e *serviceEntry) [sha256.Size]byte { return e.digest },
	}
}

// makeService makes the entry of Service k with its EndpointSlices.
func makeService(k *corev1.Service, slices []*discoveryv1.EndpointSlice, pods *podLookup, opts model.Options) *serviceEntry {
	svc := convertService(k)
	svc.Hostname = opts.Hostname(k.Namespace, k.Name)
	svc.Exposures = exposuresOf(k, pods.r.topo.cluster, func() []*corev1.Node { return list(pods.l.nodes.List) })
	pods.rec = &lookups{}
	svc.Endpoints = endpointsOf(svc, slices, pods)
	e := &serviceEntry{svc: svc, pods: pods.rec.pods, addrs: pods.rec.addrs}
	e.digest = serviceDigest(svc)
	return e
}

func podSource(l listers, pods *podLookup) kindSource[*corev1.Pod, *model.Pod] {
	return kindSource[*corev1.Pod, *model.Pod]{
		list: func() []*corev1.Pod { return list(l.pods.List) },
		get: func(ns, name string) (*corev1.Pod, bool) {
			p, err := l.pods.Pods(ns).Get(name)
			return p, err == nil
		},
		key: func(p *corev1.Pod) string { return p.Namespace + "/" + p.Name },
		make: func(p *corev1.Pod) (*model.Pod, bool) {
			m := convertPod(p)
			if m != nil {
				m.Locality, m.Network = pods.placement(p)
			}
			return m, m != nil
		},
		digest:     podDigest,
		sameObject: true,
	}
}

// policySource reads one kind of Istio policy through its lister.
func policySource[K interface {
	comparable
	metav1.Object
}, N interface{ Get(string) (K, error) }, V any](
	listAll func(labels.Selector) ([]K, error), namespaced func(string) N, make func(K) (V, bool), parts func(V) (model.Meta, proto.Message),
) kindSource[K, V] {
	return kindSource[K, V]{
		list: func() []K { return list(listAll) },
		get: func(ns, name string) (K, bool) {
			o, err := namespaced(ns).Get(name)
			return o, err == nil
		},
		key:        func(o K) string { return o.GetNamespace() + "/" + o.GetName() },
		make:       make,
		digest:     func(v V) [sha256.Size]byte { return policyDigest(parts(v)) },
		sameObject: true,
	}
}

func peerAuthnOf(o *securityv1.PeerAuthentication) (*model.PeerAuthentication, bool) {
	return &model.PeerAuthentication{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func authzOf(o *securityv1.AuthorizationPolicy) (*model.AuthorizationPolicy, bool) {
	if o.Annotations[dryRunAnnotation] == "true" {
		return nil, false
	}
	return &model.AuthorizationPolicy{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}, true
}

func reqAuthnOf(o *securityv1.RequestAuthentication) (*model.RequestAuthentication, bool) {
	return &model.RequestAuthentication{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}, true
}

func destRuleOf(o *networkingv1.DestinationRule) (*model.DestinationRule, bool) {
	return &model.DestinationRule{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func gatewayOf(o *networkingv1.Gateway) (*model.Gateway, bool) {
	return &model.Gateway{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func serviceEntryOf(o *networkingv1.ServiceEntry) (*model.ServiceEntry, bool) {
	return &model.ServiceEntry{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func telemetryOf(o *telemetryv1.Telemetry) (*model.Telemetry, bool) {
	return &model.Telemetry{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func sidecarOf(o *networkingv1.Sidecar) (*model.Sidecar, bool) {
	return &model.Sidecar{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

func virtualServiceOf(o *networkingv1.VirtualService) (*model.VirtualService, bool) {
	return &model.VirtualService{Meta: metaOf(o.Namespace, o.Name), Created: o.CreationTimestamp.Time, Spec: clone(&o.Spec)}, true
}

// slicesOf are the EndpointSlices of service namespace/name, by name.
func slicesOf(l listers, namespace, name string) []*discoveryv1.EndpointSlice {
	objs, _ := l.sliceIndex.ByIndex(sliceServiceIndex, namespace+"/"+name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// dryRunAnnotation marks an AuthorizationPolicy that Istio evaluates and
// logs but does not enforce.
const dryRunAnnotation = "istio.io/dry-run"

// list returns everything a lister holds. Listing every object cannot fail:
// only a bad selector makes a lister's List fail.
func list[T any](fn func(labels.Selector) ([]T, error)) []T {
	out, _ := fn(labels.Everything())
	return out
}

func metaOf(namespace, name string) model.Meta { return model.Meta{Name: name, Namespace: namespace} }

func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }

// convertService copies a Service's selector and ports. Ports the
// apiserver would not accept are left out rather than trusted.
func convertService(k *corev1.Service) *model.Service {
	svc := &model.Service{
		Meta: metaOf(k.Namespace, k.Name), Selector: maps.Clone(k.Spec.Selector),
		Addresses: clusterIPs(k.Spec), Headless: k.Spec.ClusterIP == corev1.ClusterIPNone,
		ExportTo: model.ParseExportTo(k.Annotations[model.ExportToAnnotation]),
	}
	for _, p := range k.Spec.Ports {
		if !validPort(p.Port) {
			continue
		}
		port := model.Port{Name: p.Name, Port: uint32(p.Port), Protocol: string(p.Protocol)}
		if p.AppProtocol != nil && *p.AppProtocol != "" {
			port.Protocol = *p.AppProtocol
		}
		switch {
		case p.TargetPort.Type == intstr.String:
			port.TargetPortName = p.TargetPort.StrVal
		case validPort(p.TargetPort.IntVal):
			port.TargetPort = uint32(p.TargetPort.IntVal)
		}
		svc.Ports = append(svc.Ports, port)
	}
	return svc
}

// exposuresOf is what may make Service k of cluster a network gateway:
// its topology.istio.io/network and networking.istio.io/gatewayPort
// labels, the ingress addresses of its load balancer (IPs, else
// hostnames, as Istio reads them) and its externalIPs, and its ports;
// nil for a Service with neither a network label nor an address, nor a
// NodePort gateway. A NodePort gateway (type NodePort with Istio's
// traffic.istio.io/nodeSelector annotation) is, as in Istio, at its
// externalIPs, else at the external IP of each of nodes whose labels
// include the annotation's (a JSON map; empty: every node), and its
// ports have their node ports.
func exposuresOf(k *corev1.Service, cluster string, nodes func() []*corev1.Node) []model.Exposure {
	e := model.Exposure{Cluster: cluster, Network: k.Labels[model.NetworkLabel], GatewayPort: k.Labels[model.GatewayPortLabel]}
	selector, isNodePort := k.Annotations[model.NodeSelectorAnnotation]
	if isNodePort && k.Spec.Type == corev1.ServiceTypeNodePort {
		e.NodePort = true
		if len(k.Spec.ExternalIPs) == 0 {
			e.Addresses, e.NodeSelectorInvalid = nodeAddresses(selector, nodes())
		}
	}
	if k.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range k.Status.LoadBalancer.Ingress {
			if a := cmp.Or(in.IP, in.Hostname); a != "" && len(e.Addresses) < maxExposedAddresses {
				e.Addresses = append(e.Addresses, a)
			}
		}
	}
	for _, a := range k.Spec.ExternalIPs {
		if a != "" && len(e.Addresses) < maxExposedAddresses {
			e.Addresses = append(e.Addresses, a)
		}
	}
	if e.Network == "" && len(e.Addresses) == 0 && !e.NodePort {
		return nil
	}
	for _, p := range k.Spec.Ports {
		if validPort(p.Port) {
			e.Ports = append(e.Ports, uint32(p.Port))
			if e.NodePort {
				e.NodePorts = append(e.NodePorts, uint32(max(p.NodePort, 0)))
			}
		}
	}
	return []model.Exposure{e}
}

// nodeAddresses are the external IPs, sorted, of the nodes whose labels
// include those of selector, a NodePort gateway's node selector: a JSON
// map of labels, every node when empty, as Istio reads it. invalid: the
// selector is not such a map (Istio then picks every node; here none).
func nodeAddresses(selector string, nodes []*corev1.Node) (addrs []string, invalid bool) {
	var want map[string]string
	if selector != "" {
		if len(selector) > maxNodeSelector || json.Unmarshal([]byte(selector), &want) != nil {
			return nil, true
		}
	}
	for _, n := range nodes {
		ip := externalIP(n)
		if ip == "" || !selects(want, n.Labels) {
			continue
		}
		addrs = append(addrs, ip)
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) > maxExposedAddresses {
		addrs = addrs[:maxExposedAddresses]
	}
	return addrs, false
}

// selects reports whether labels include every label of want.
func selects(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// maxNodeSelector bounds the node selector annotation read (annotations
// are at most 256 KiB together).
const maxNodeSelector = 16 << 10

// maxExposedAddresses bounds the ingress addresses read of one Service.
const maxExposedAddresses = 64

// convertPod is the workload of a pod that may run a sidecar: not one that
// has ended.
func convertPod(pod *corev1.Pod) *model.Pod {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	p := &model.Pod{
		Meta: metaOf(pod.Namespace, pod.Name), UID: string(pod.UID),
		ServiceAccount: cmp.Or(pod.Spec.ServiceAccountName, "default"), Labels: maps.Clone(pod.Labels),
	}
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			p.IPs = append(p.IPs, a.String())
		}
	}
	if len(p.IPs) == 0 && pod.Status.PodIP != "" {
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			p.IPs = []string{a.String()}
		}
	}
	return p
}

// clusterIPs are a Service's virtual IPs: none when headless, and only
// well-formed addresses.
func clusterIPs(spec corev1.ServiceSpec) []string {
	ips := spec.ClusterIPs
	if len(ips) == 0 && spec.ClusterIP != "" {
		ips = []string{spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && !a.Is4In6() && a.Zone() == "" {
			out = append(out, a.String())
		}
	}
	return out
}

func validPort(p int32) bool { return p > 0 && p <= 65535 }

// sliceServiceIndex indexes EndpointSlices by "<namespace>/<service>" of
// their kubernetes.io/service-name label. Slices without the label belong
// to no service.
const sliceServiceIndex = "namespace/service"

func indexSliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}
