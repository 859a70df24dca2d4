package kubesource

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	networkinglisters "istio.io/client-go/pkg/listers/networking/v1"
	securitylisters "istio.io/client-go/pkg/listers/security/v1"
	telemetrylisters "istio.io/client-go/pkg/listers/telemetry/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
)

// podIPIndex indexes pods by "<namespace>/<ip>" of each pod IP.
const podIPIndex = "namespace/ip"

// listers are the read side of the informers' caches.
type listers struct {
	services     corelisters.ServiceLister
	slices       discoverylisters.EndpointSliceLister
	sliceIndex   cache.Indexer // with sliceServiceIndex
	pods         corelisters.PodLister
	podIndex     cache.Indexer // with podIPIndex
	nodes        corelisters.NodeLister
	peerAuthn    securitylisters.PeerAuthenticationLister
	authz        securitylisters.AuthorizationPolicyLister
	requestAuthn securitylisters.RequestAuthenticationLister
	destRules    networkinglisters.DestinationRuleLister
	gateways     networkinglisters.GatewayLister
	// virtualServices is the lister of VirtualServices.
	virtualServices networkinglisters.VirtualServiceLister
	// serviceEntries is the lister of ServiceEntries.
	serviceEntries networkinglisters.ServiceEntryLister
	// telemetries is the lister of Telemetries.
	telemetries telemetrylisters.TelemetryLister
	// sidecars is the lister of Sidecars.
	sidecars networkinglisters.SidecarLister
}

// informers are the cluster-wide informers a Source reads. Run's goroutine
// alone uses them.
type informers struct {
	kube    k8sinformers.SharedInformerFactory
	istio   istioinformers.SharedInformerFactory
	log     *slog.Logger
	changed func(objs ...any) // the objects an event changed
	// named are the informers whose caches build reads, by resource.
	named map[string]cache.SharedIndexInformer
	// staged are the informers of served Istio kinds whose caches build
	// does not read yet, because they have not synced.
	staged map[string]staged
	// missing are the Istio kinds not served at the last discovery, or
	// all of them before the first discovery answered.
	missing    []istioKind
	discovered bool
	listers    listers
}

// newInformers creates the Kubernetes informers, with their transforms,
// indexers and handlers calling changed; nothing runs until start. The
// Istio kinds read as empty until discover finds them served; with
// endpointsOnly, they always read as empty and discovery is not asked.
func newInformers(client kubernetes.Interface, istio versioned.Interface, endpointsOnly bool, log *slog.Logger, changed func(objs ...any)) (*informers, error) {
	kf := k8sinformers.NewSharedInformerFactoryWithOptions(client, 0, k8sinformers.WithTransform(transform))
	isf := istioinformers.NewSharedInformerFactoryWithOptions(istio, 0, istioinformers.WithTransform(transform))
	svc, eps, pods := kf.Core().V1().Services(), kf.Discovery().V1().EndpointSlices(), kf.Core().V1().Pods()
	nodes := kf.Core().V1().Nodes()
	inf := &informers{
		kube:    kf,
		istio:   isf,
		log:     log,
		changed: changed,
		named:   map[string]cache.SharedIndexInformer{},
		staged:  map[string]staged{},
		missing: istioKinds(),
		listers: listers{
			services: svc.Lister(), slices: eps.Lister(), sliceIndex: eps.Informer().GetIndexer(),
			pods: pods.Lister(), podIndex: pods.Informer().GetIndexer(),
			nodes: nodes.Lister(),
		},
	}
	for _, k := range inf.missing {
		k.setLister(&inf.listers, emptyIndexer())
	}
	if endpointsOnly {
		inf.missing, inf.discovered = nil, true
	}
	if err := pods.Informer().AddIndexers(cache.Indexers{podIPIndex: indexPodIPs}); err != nil {
		return nil, fmt.Errorf("index pods: %w", err)
	}
	if err := eps.Informer().AddIndexers(cache.Indexers{sliceServiceIndex: indexSliceService}); err != nil {
		return nil, fmt.Errorf("index endpoint slices: %w", err)
	}
	kube := map[string]cache.SharedIndexInformer{
		"services": svc.Informer(), "endpointslices": eps.Informer(), "pods": pods.Informer(),
		"nodes": nodes.Informer(),
	}
	for _, name := range slices.Sorted(maps.Keys(kube)) {
		if err := inf.watch(name, kube[name]); err != nil {
			return nil, err
		}
		inf.named[name] = kube[name]
	}
	return inf, nil
}

// watch adds the handler and the watch error logger to an informer not yet
// started.
func (i *informers) watch(name string, inf cache.SharedIndexInformer) error {
	if _, err := inf.AddEventHandler(handler{changed: i.changed}); err != nil {
		return fmt.Errorf("watch %s: %w", name, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(kubewatch.ErrorLogger(i.log, name)); err != nil {
		return fmt.Errorf("watch %s: %w", name, err)
	}
	return nil
}

// start starts the Kubernetes informers; discover starts the Istio ones.
func (i *informers) start(stop <-chan struct{}) { i.kube.Start(stop) }

// shutdown waits for the informers to stop; their stop channel must be
// closed.
func (i *informers) shutdown() {
	i.kube.Shutdown()
	i.istio.Shutdown()
}

// synced reports whether build reads complete caches of everything the
// apiserver serves: discovery has answered, every read cache has synced
// and no served kind waits in staging.
func (i *informers) synced() bool {
	return i.discovered && len(i.staged) == 0 && len(i.unsynced()) == 0
}

// unsynced names, sorted, the informers whose caches have not synced or
// are staged and, before discovery has answered, the Istio kinds it has
// not found yet.
func (i *informers) unsynced() []string {
	var out []string
	for name, inf := range i.named {
		if !inf.HasSynced() {
			out = append(out, name)
		}
	}
	out = slices.AppendSeq(out, maps.Keys(i.staged))
	if !i.discovered {
		for _, k := range i.missing {
			out = append(out, k.resource)
		}
	}
	slices.Sort(out)
	return out
}

// handler asks for a rebuild on every change, naming the objects it
// changed (both versions of an update). Resyncs, which repeat an object
// unchanged, and pod and node updates that change nothing the model reads
// (a node's status heartbeats) are ignored.
type handler struct{ changed func(objs ...any) }

var _ cache.ResourceEventHandler = handler{}

func (h handler) OnAdd(obj any, _ bool) { h.changed(obj) }

func (h handler) OnDelete(obj any) { h.changed(obj) }

func (h handler) OnUpdate(oldObj, newObj any) {
	switch o := oldObj.(type) {
	case *corev1.Pod:
		if n, ok := newObj.(*corev1.Pod); ok && samePod(o, n) {
			return
		}
	case *corev1.Node:
		if n, ok := newObj.(*corev1.Node); ok && sameNode(o, n) {
			return
		}
	}
	o, errOld := meta.Accessor(oldObj)
	n, errNew := meta.Accessor(newObj)
	if errOld == nil && errNew == nil && o.GetResourceVersion() == n.GetResourceVersion() && o.GetResourceVersion() != "" {
		return
	}
	h.changed(oldObj, newObj)
}

// indexPodIPs indexes a pod by its IPs within its namespace.
func indexPodIPs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	add := func(ip string) {
		if k := pod.Namespace + "/" + ip; ip != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	add(pod.Status.PodIP)
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	return keys, nil
}
