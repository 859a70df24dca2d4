package migrate

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
	"github.com/bulwark-mesh/bulwark/pkg/inject"
)

// injectedSelector selects the pods an injector made: Istio's templates
// (sidecar, gRPC agent, gateway) and Bulwark's injector all label them
// service.istio.io/canonical-name; security.istio.io/tlsMode is left off
// gateways and gRPC agents.
const injectedSelector = inject.LabelCanonicalName

// Proxy is a pod with an injected istio-proxy whose agent does not take
// the trust bundle over xDS.
type Proxy struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Revision is the revision that injected it.
	Revision string `json:"revision"`
}

func (p Proxy) String() string { return p.Namespace + "/" + p.Name + " (" + p.Revision + ")" }

// proxyOf is the Proxy of pod when its injected istio-proxy lacks PCDS
// and it has not ended.
func proxyOf(pod *corev1.Pod) (Proxy, bool) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Proxy{}, false
	}
	ip, ok := inject.InjectedProxyOf(pod)
	if !ok || ip.PCDS {
		return Proxy{}, false
	}
	return Proxy{Namespace: pod.Namespace, Name: pod.Name, Revision: ip.Revision}, true
}

func sortProxies(ps []Proxy) {
	slices.SortFunc(ps, func(a, b Proxy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// listPageSize bounds each page of a pod list.
const listPageSize = 500

// ListProxies lists, page by page, the running pods whose injected
// istio-proxy does not take the trust bundle over xDS, by namespace and
// name.
func ListProxies(ctx context.Context, client kubernetes.Interface) ([]Proxy, error) {
	var out []Proxy
	opts := metav1.ListOptions{LabelSelector: injectedSelector, Limit: listPageSize}
	for {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list injected pods: %w", err)
		}
		for i := range list.Items {
			if p, ok := proxyOf(&list.Items[i]); ok {
				out = append(out, p)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sortProxies(out)
	return out, nil
}

// Proxies watches the injected pods and tells those whose istio-proxy
// does not take the trust bundle over xDS. The informer keeps of each pod
// only what tells that.
type Proxies struct {
	informer cache.SharedIndexInformer
}

// NewProxies returns a watch of the cluster's injected pods; its list and
// watch failures go to log (nil: none). It does no I/O and starts nothing.
func NewProxies(client kubernetes.Interface, log *slog.Logger) (*Proxies, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = injectedSelector }))
	p := &Proxies{informer: f.Core().V1().Pods().Informer()}
	if err := p.informer.SetTransform(trimPod); err != nil {
		return nil, fmt.Errorf("watch injected pods: %w", err)
	}
	if err := p.informer.SetWatchErrorHandlerWithContext(kubewatch.ErrorLogger(log, "pods ("+injectedSelector+")")); err != nil {
		return nil, fmt.Errorf("watch injected pods: %w", err)
	}
	return p, nil
}

// trimPod keeps of a pod what proxyOf reads: its name, the revision label
// and annotation, the status annotation, the istio-proxy container with its
// PROXY_CONFIG_XDS_AGENT variable alone, and its phase. It is idempotent,
// as informers require.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if v, ok := pod.Labels[inject.AnnotationRevision]; ok {
		out.Labels = map[string]string{inject.AnnotationRevision: v}
	}
	for _, k := range []string{inject.AnnotationStatus, inject.AnnotationRevision} {
		if v, ok := pod.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	out.Spec.Containers = trimProxy(pod.Spec.Containers)
	out.Spec.InitContainers = trimProxy(pod.Spec.InitContainers)
	return out, nil
}

func trimProxy(cs []corev1.Container) []corev1.Container {
	for _, c := range cs {
		if c.Name != inject.ProxyContainerName {
			continue
		}
		out := corev1.Container{Name: c.Name}
		for _, e := range c.Env {
			if e.Name == inject.EnvProxyConfigXDSAgent {
				out.Env = append(out.Env, e)
			}
		}
		return []corev1.Container{out}
	}
	return nil
}

// Run watches until ctx is done.
func (p *Proxies) Run(ctx context.Context) error {
	p.informer.RunWithContext(ctx)
	return nil
}

// HasSynced reports whether every injected pod has been listed.
func (p *Proxies) HasSynced() bool { return p.informer.HasSynced() }

// List returns the running pods without PCDS, by namespace and name.
func (p *Proxies) List() []Proxy {
	var out []Proxy
	for _, obj := range p.informer.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp == nil {
			if px, ok := proxyOf(pod); ok {
				out = append(out, px)
			}
		}
	}
	sortProxies(out)
	return out
}

const withoutPCDSHelp = "Running pods whose injected istio-proxy does not take the trust bundle over xDS (PROXY_CONFIG_XDS_AGENT not true, as Istio's injector leaves it), by the revision that injected them: a root rotation reaches them only when they restart. istiod ca status names them."

var withoutPCDSDesc = prometheus.NewDesc("bulwark_proxies_without_pcds", withoutPCDSHelp, []string{"revision"}, nil)

// Collector returns the gauge bulwark_proxies_without_pcds{revision}.
func (p *Proxies) Collector() prometheus.Collector { return proxiesCollector{p} }

type proxiesCollector struct{ p *Proxies }

func (proxiesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- withoutPCDSDesc }

func (c proxiesCollector) Collect(ch chan<- prometheus.Metric) {
	byRev := map[string]int{}
	for _, px := range c.p.List() {
		byRev[px.Revision]++
	}
	for _, rev := range slices.Sorted(maps.Keys(byRev)) {
		ch <- prometheus.MustNewConstMetric(withoutPCDSDesc, prometheus.GaugeValue, float64(byRev[rev]), rev)
	}
}
