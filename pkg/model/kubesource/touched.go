package kubesource

import (
	"crypto/sha256"

	istionetworking "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	istiotelemetry "istio.io/client-go/pkg/apis/telemetry/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// touched is what informer events changed since the last rebuild: a
// rebuild makes again only what these can change and keeps the rest.
// Keys are "<namespace>/<name>".
type touched struct {
	// all: anything may have changed (a cache the build had not read
	// before, such as an Istio kind whose CRD appeared).
	all bool
	// nodes: a node changed; the localities of any service's endpoints
	// may have.
	nodes    bool
	services map[string]bool // Services, and the services of EndpointSlices
	pods     map[string]bool
	addrs    map[string]bool // "<namespace>/<ip>" of the pods' addresses, before and after
	// The policies, by kind.
	peerAuthn, authz, reqAuthn, destRules map[string]bool
	gateways, virtualSvcs, svcEntries     map[string]bool
	telemetries                           map[string]bool
	sidecars                              map[string]bool
}

// add records a changed object.
func (t *touched) add(obj any) {
	switch o := obj.(type) {
	case cache.DeletedFinalStateUnknown:
		t.add(o.Obj)
	case *corev1.Service:
		mark(&t.services, o.Namespace+"/"+o.Name)
	case *discoveryv1.EndpointSlice:
		if name := o.Labels[discoveryv1.LabelServiceName]; name != "" {
			mark(&t.services, o.Namespace+"/"+name)
		}
	case *corev1.Pod:
		mark(&t.pods, o.Namespace+"/"+o.Name)
		if o.Status.PodIP != "" {
			mark(&t.addrs, o.Namespace+"/"+o.Status.PodIP)
		}
		for _, ip := range o.Status.PodIPs {
			mark(&t.addrs, o.Namespace+"/"+ip.IP)
		}
	case *corev1.Node:
		t.nodes = true
	case *istiosecurity.PeerAuthentication:
		mark(&t.peerAuthn, o.Namespace+"/"+o.Name)
	case *istiosecurity.AuthorizationPolicy:
		mark(&t.authz, o.Namespace+"/"+o.Name)
	case *istiosecurity.RequestAuthentication:
		mark(&t.reqAuthn, o.Namespace+"/"+o.Name)
	case *istionetworking.DestinationRule:
		mark(&t.destRules, o.Namespace+"/"+o.Name)
	case *istionetworking.Gateway:
		mark(&t.gateways, o.Namespace+"/"+o.Name)
	case *istionetworking.VirtualService:
		mark(&t.virtualSvcs, o.Namespace+"/"+o.Name)
	case *istionetworking.ServiceEntry:
		mark(&t.svcEntries, o.Namespace+"/"+o.Name)
	case *istiotelemetry.Telemetry:
		mark(&t.telemetries, o.Namespace+"/"+o.Name)
	case *istionetworking.Sidecar:
		mark(&t.sidecars, o.Namespace+"/"+o.Name)
	default:
		t.all = true // a kind this does not know: read everything again
	}
}

func mark(m *map[string]bool, key string) {
	if *m == nil {
		*m = map[string]bool{}
	}
	(*m)[key] = true
}

// serviceEntry is what a rebuild made of one Service: its model, complete
// and shared by every snapshot until one of its inputs changes, the digest
// the version hashes, and what its endpoints looked up besides its
// Service and EndpointSlices, whose events name it directly.
type serviceEntry struct {
	svc    *model.Service
	digest [sha256.Size]byte
	pods   []string // "<namespace>/<name>" of the pods its endpoints named
	addrs  []string // "<namespace>/<ip>" of the addresses of endpoints that name no pod
}

// lookups records what a service's endpoints looked up.
type lookups struct {
	pods, addrs []string
}

// staleServices adds to t.services the services whose endpoints read a
// pod or an address that changed, or, when a node changed, every one.
func (t *touched) staleServices(entries []*serviceEntry) {
	for _, e := range entries {
		stale := t.nodes
		for _, p := range e.pods {
			stale = stale || t.pods[p]
		}
		for _, a := range e.addrs {
			stale = stale || t.addrs[a]
		}
		if stale {
			mark(&t.services, e.svc.Namespace+"/"+e.svc.Name)
		}
	}
}
