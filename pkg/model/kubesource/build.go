package kubesource

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// build converts the caches' content into a snapshot whose version is the
// hash of that content. It copies everything it keeps: the snapshot shares
// nothing with the caches.
func build(l listers, opts model.Options) *model.Snapshot {
	return buildReusing(l, opts, &reuse{})
}

// buildReusing is build, reusing what the last rebuild made of the
// objects that did not change since (r). Snapshots share those: nothing
// changes them.
func buildReusing(l listers, opts model.Options, r *reuse) *model.Snapshot {
	defer r.done()
	var res model.Resources
	bySvc := groupSlices(list(l.slices.List))
	pods := newPodLookup(l, r)
	for _, k := range list(l.services.List) {
		svc := *r.services.get(k, func() *model.Service { return convertService(k) }) // model.Build sets fields of its own copy
		svc.Endpoints = endpointsOf(&svc, bySvc[k.Namespace+"/"+k.Name], pods)
		res.Services = append(res.Services, &svc)
	}
	res.Pods = []*model.Pod{} // a registry, even when empty
	for _, pod := range list(l.pods.List) {
		if p := r.pods.get(pod, func() *model.Pod { return convertPod(pod) }); p != nil {
			res.Pods = append(res.Pods, p)
		}
	}
	for _, o := range list(l.peerAuthn.List) {
		res.PeerAuthentications = append(res.PeerAuthentications, r.peerAuthn.get(o, func() *model.PeerAuthentication {
			return &model.PeerAuthentication{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}
		}))
	}
	for _, o := range list(l.authz.List) {
		if o.Annotations[dryRunAnnotation] == "true" {
			continue
		}
		res.AuthorizationPolicies = append(res.AuthorizationPolicies, r.authz.get(o, func() *model.AuthorizationPolicy {
			return &model.AuthorizationPolicy{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}
		}))
	}
	for _, o := range list(l.requestAuthn.List) {
		res.RequestAuthentications = append(res.RequestAuthentications, r.reqAuthn.get(o, func() *model.RequestAuthentication {
			return &model.RequestAuthentication{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}
		}))
	}
	for _, o := range list(l.destRules.List) {
		res.DestinationRules = append(res.DestinationRules, r.destRules.get(o, func() *model.DestinationRule {
			return &model.DestinationRule{Meta: metaOf(o.Namespace, o.Name), Spec: clone(&o.Spec)}
		}))
	}
	sortResources(&res)
	return model.Build(versionOf(&res, r.specBytes), opts, res)
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

// groupSlices groups EndpointSlices by "<namespace>/<service>" of their
// kubernetes.io/service-name label, each group sorted by name. Slices
// without the label belong to no service.
func groupSlices(all []*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := make(map[string][]*discoveryv1.EndpointSlice)
	for _, s := range all {
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		key := s.Namespace + "/" + name
		out[key] = append(out[key], s)
	}
	for _, group := range out {
		slices.SortFunc(group, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

func sortResources(r *model.Resources) {
	slices.SortFunc(r.Services, func(a, b *model.Service) int { return byMeta(a.Meta, b.Meta) })
	slices.SortFunc(r.Pods, func(a, b *model.Pod) int { return byMeta(a.Meta, b.Meta) })
	slices.SortFunc(r.PeerAuthentications, func(a, b *model.PeerAuthentication) int { return byMeta(a.Meta, b.Meta) })
	slices.SortFunc(r.AuthorizationPolicies, func(a, b *model.AuthorizationPolicy) int { return byMeta(a.Meta, b.Meta) })
	slices.SortFunc(r.RequestAuthentications, func(a, b *model.RequestAuthentication) int { return byMeta(a.Meta, b.Meta) })
	slices.SortFunc(r.DestinationRules, func(a, b *model.DestinationRule) int { return byMeta(a.Meta, b.Meta) })
}

func byMeta(a, b model.Meta) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
