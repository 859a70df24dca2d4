package kubesource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"

	"istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	networkinglisters "istio.io/client-go/pkg/listers/networking/v1"
	securitylisters "istio.io/client-go/pkg/listers/security/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// podIPIndex indexes pods by "<namespace>/<ip>" of each pod IP.
const podIPIndex = "namespace/ip"

// listers are the read side of the informers' caches.
type listers struct {
	services     corelisters.ServiceLister
	slices       discoverylisters.EndpointSliceLister
	pods         corelisters.PodLister
	podIndex     cache.Indexer // with podIPIndex
	peerAuthn    securitylisters.PeerAuthenticationLister
	authz        securitylisters.AuthorizationPolicyLister
	requestAuthn securitylisters.RequestAuthenticationLister
	destRules    networkinglisters.DestinationRuleLister
}

// informers are the cluster-wide informers a Source reads.
type informers struct {
	kube    k8sinformers.SharedInformerFactory
	istio   istioinformers.SharedInformerFactory
	named   map[string]cache.SharedIndexInformer
	listers listers
}

// newInformers creates the informers, with their transforms, indexers and
// handlers calling changed; nothing runs until start.
func newInformers(client kubernetes.Interface, istio versioned.Interface, log *slog.Logger, changed func()) (*informers, error) {
	kf := k8sinformers.NewSharedInformerFactoryWithOptions(client, 0, k8sinformers.WithTransform(transform))
	isf := istioinformers.NewSharedInformerFactoryWithOptions(istio, 0, istioinformers.WithTransform(transform))
	svc, eps, pods := kf.Core().V1().Services(), kf.Discovery().V1().EndpointSlices(), kf.Core().V1().Pods()
	pa, ap := isf.Security().V1().PeerAuthentications(), isf.Security().V1().AuthorizationPolicies()
	ra, dr := isf.Security().V1().RequestAuthentications(), isf.Networking().V1().DestinationRules()
	inf := &informers{
		kube:  kf,
		istio: isf,
		named: map[string]cache.SharedIndexInformer{
			"services": svc.Informer(), "endpointslices": eps.Informer(), "pods": pods.Informer(),
			"peerauthentications": pa.Informer(), "authorizationpolicies": ap.Informer(),
			"requestauthentications": ra.Informer(), "destinationrules": dr.Informer(),
		},
		listers: listers{
			services: svc.Lister(), slices: eps.Lister(), pods: pods.Lister(), podIndex: pods.Informer().GetIndexer(),
			peerAuthn: pa.Lister(), authz: ap.Lister(), requestAuthn: ra.Lister(), destRules: dr.Lister(),
		},
	}
	if err := pods.Informer().AddIndexers(cache.Indexers{podIPIndex: indexPodIPs}); err != nil {
		return nil, fmt.Errorf("index pods: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(inf.named)) {
		i := inf.named[name]
		if _, err := i.AddEventHandler(handler{changed: changed}); err != nil {
			return nil, fmt.Errorf("watch %s: %w", name, err)
		}
		if err := i.SetWatchErrorHandlerWithContext(watchErrorLogger(log, name)); err != nil {
			return nil, fmt.Errorf("watch %s: %w", name, err)
		}
	}
	return inf, nil
}

func (i *informers) start(stop <-chan struct{}) {
	i.kube.Start(stop)
	i.istio.Start(stop)
}

// shutdown waits for the informers to stop; their stop channel must be
// closed.
func (i *informers) shutdown() {
	i.kube.Shutdown()
	i.istio.Shutdown()
}

// unsynced names the informers whose caches have not synced, sorted.
func (i *informers) unsynced() []string {
	var out []string
	for name, inf := range i.named {
		if !inf.HasSynced() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// watchErrorLogger logs list and watch failures through the injected
// logger instead of klog. A closed or expired watch is routine.
func watchErrorLogger(log *slog.Logger, name string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			log.Debug("Kubernetes watch restarted", "resource", name, "err", err)
			return
		}
		log.Warn("Kubernetes list or watch failed; retrying", "resource", name, "err", err)
	}
}

// handler asks for a rebuild on every change. Resyncs, which repeat an
// object unchanged, and pod updates that change nothing the model reads
// are ignored.
type handler struct{ changed func() }

var _ cache.ResourceEventHandler = handler{}

func (h handler) OnAdd(any, bool) { h.changed() }

func (h handler) OnDelete(any) { h.changed() }

func (h handler) OnUpdate(oldObj, newObj any) {
	if oldPod, ok := oldObj.(*corev1.Pod); ok {
		if newPod, ok := newObj.(*corev1.Pod); ok && samePod(oldPod, newPod) {
			return
		}
	}
	o, errOld := meta.Accessor(oldObj)
	n, errNew := meta.Accessor(newObj)
	if errOld == nil && errNew == nil && o.GetResourceVersion() == n.GetResourceVersion() && o.GetResourceVersion() != "" {
		return
	}
	h.changed()
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
