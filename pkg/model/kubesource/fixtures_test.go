package kubesource

import (
	"fmt"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	networkinglisters "istio.io/client-go/pkg/listers/networking/v1"
	securitylisters "istio.io/client-go/pkg/listers/security/v1"
	telemetrylisters "istio.io/client-go/pkg/listers/telemetry/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// cacheListers returns listers over in-memory caches holding objs, passed
// through the informers' transform, as a running Source would see them.
func cacheListers(tb testing.TB, objs ...any) listers {
	tb.Helper()
	l, _ := cacheIndexers(tb, objs...)
	return l
}

// cacheIndexers is cacheListers, with the caches by kind: "svc", "eps",
// "pod", "node", "pa", "ap", "ra", "dr", "gw", "vs", "se", "tel" and "sc".
func cacheIndexers(tb testing.TB, objs ...any) (listers, map[string]cache.Indexer) {
	tb.Helper()
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	idx := map[string]cache.Indexer{}
	for _, kind := range []string{"svc", "eps", "pod", "node", "pa", "ap", "ra", "dr", "gw", "vs", "se", "tel", "sc"} {
		idx[kind] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIndex)
	}
	if err := idx["pod"].AddIndexers(cache.Indexers{podIPIndex: indexPodIPs}); err != nil {
		tb.Fatal(err)
	}
	if err := idx["eps"].AddIndexers(cache.Indexers{sliceServiceIndex: indexSliceService}); err != nil {
		tb.Fatal(err)
	}
	for _, o := range objs {
		o, err := transform(o)
		if err != nil {
			tb.Fatal(err)
		}
		if err := idx[kindOf(tb, o)].Add(o); err != nil {
			tb.Fatal(err)
		}
	}
	return listers{
		services:        corelisters.NewServiceLister(idx["svc"]),
		slices:          discoverylisters.NewEndpointSliceLister(idx["eps"]),
		sliceIndex:      idx["eps"],
		pods:            corelisters.NewPodLister(idx["pod"]),
		podIndex:        idx["pod"],
		nodes:           corelisters.NewNodeLister(idx["node"]),
		peerAuthn:       securitylisters.NewPeerAuthenticationLister(idx["pa"]),
		authz:           securitylisters.NewAuthorizationPolicyLister(idx["ap"]),
		requestAuthn:    securitylisters.NewRequestAuthenticationLister(idx["ra"]),
		destRules:       networkinglisters.NewDestinationRuleLister(idx["dr"]),
		gateways:        networkinglisters.NewGatewayLister(idx["gw"]),
		virtualServices: networkinglisters.NewVirtualServiceLister(idx["vs"]),
		serviceEntries:  networkinglisters.NewServiceEntryLister(idx["se"]),
		telemetries:     telemetrylisters.NewTelemetryLister(idx["tel"]),
		sidecars:        networkinglisters.NewSidecarLister(idx["sc"]),
	}, idx
}

// kindOf is the cacheIndexers kind of a fixture.
func kindOf(tb testing.TB, o any) string {
	kind := map[string]string{
		"*v1.Service": "svc", "*v1.EndpointSlice": "eps", "*v1.Pod": "pod", "*v1.Node": "node",
		"*v1.PeerAuthentication": "pa", "*v1.AuthorizationPolicy": "ap",
		"*v1.RequestAuthentication": "ra", "*v1.DestinationRule": "dr",
		"*v1.Gateway": "gw", "*v1.VirtualService": "vs", "*v1.ServiceEntry": "se",
		"*v1.Sidecar": "sc", "*v1.Telemetry": "tel",
	}[fmt.Sprintf("%T", o)]
	if kind == "" {
		tb.Fatalf("fixture of unknown type %T", o)
	}
	return kind
}

func objectMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, ResourceVersion: "1"}
}

func newService(ns, name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: objectMeta(ns, name, nil), Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
}

func servicePort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

func newPod(ns, name, sa, ip string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: objectMeta(ns, name, labels),
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	p.UID = types.UID("uid-" + ns + "-" + name)
	return p
}

// newSlice is an IPv4 EndpointSlice of service with ports name=port.
func newSlice(ns, name, service string, ports map[string]int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  objectMeta(ns, name, map[string]string{discoveryv1.LabelServiceName: service}),
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}
	for n, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(p)})
	}
	return s
}

// podEndpoint is a ready endpoint of pod ns/name at ip.
func podEndpoint(ns, name, ip string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name},
	}
}

// newNode is a node with labels.
func newNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: objectMeta("", name, labels)}
}

func newPeerAuthentication(ns, name string) *istiosecurity.PeerAuthentication {
	return &istiosecurity.PeerAuthentication{ObjectMeta: objectMeta(ns, name, nil)}
}

// newGateway is a Gateway selecting istio=<selector> (none when empty),
// with one HTTP server for host, created at second created.
func newGateway(ns, name, selector, host string, created int64) *istionetworking.Gateway {
	gw := &istionetworking.Gateway{ObjectMeta: objectMeta(ns, name, nil)}
	gw.CreationTimestamp = metav1.Unix(created, 0)
	if selector != "" {
		gw.Spec.Selector = map[string]string{"istio": selector}
	}
	gw.Spec.Servers = []*networkingv1.Server{{
		Port:  &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"},
		Hosts: []string{host},
	}}
	return gw
}

// newVirtualService routes host, on gateway, to service dest.
func newVirtualService(ns, name, host, gateway, dest string) *istionetworking.VirtualService {
	vs := &istionetworking.VirtualService{ObjectMeta: objectMeta(ns, name, nil)}
	vs.Spec.Hosts = []string{host}
	vs.Spec.Gateways = []string{gateway}
	vs.Spec.Http = []*networkingv1.HTTPRoute{{
		Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: dest}}},
	}}
	return vs
}

// newServiceEntry adds host, of resolution, with port 80 and either
// endpoints at addrs or, with none, the pods of app (when not empty).
func newServiceEntry(ns, name, host string, resolution networkingv1.ServiceEntry_Resolution, app string, created int64, addrs ...string) *istionetworking.ServiceEntry {
	se := &istionetworking.ServiceEntry{ObjectMeta: objectMeta(ns, name, nil)}
	se.CreationTimestamp = metav1.Unix(created, 0)
	se.Spec.Hosts = []string{host}
	se.Spec.Resolution = resolution
	se.Spec.Ports = []*networkingv1.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
	for _, a := range addrs {
		se.Spec.Endpoints = append(se.Spec.Endpoints, &networkingv1.WorkloadEntry{Address: a})
	}
	if len(addrs) == 0 && app != "" {
		se.Spec.WorkloadSelector = &networkingv1.WorkloadSelector{Labels: map[string]string{"app": app}}
	}
	return se
}

// newSidecar scopes the egress of ns (of the workloads of app, when not
// empty) to hosts.
func newSidecar(ns, name, app string, created int64, hosts ...string) *istionetworking.Sidecar {
	sc := &istionetworking.Sidecar{ObjectMeta: objectMeta(ns, name, nil)}
	sc.CreationTimestamp = metav1.Unix(created, 0)
	sc.Spec.Egress = []*networkingv1.IstioEgressListener{{Hosts: hosts}}
	if app != "" {
		sc.Spec.WorkloadSelector = &networkingv1.WorkloadSelector{Labels: map[string]string{"app": app}}
	}
	return sc
}

func newDestinationRule(ns, name, host string) *istionetworking.DestinationRule {
	dr := &istionetworking.DestinationRule{ObjectMeta: objectMeta(ns, name, nil)}
	dr.Spec.Host = host
	return dr
}
