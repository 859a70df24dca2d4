package kubesource

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8sinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// watchSystemNamespace watches the one Namespace Config.SystemNamespace
// names, whose topology.istio.io/network label is the cluster's network
// ahead of meshNetworks', as Istio reads it (pod label, then this label,
// then meshNetworks). The model does not wait for it: until it has synced,
// or while it cannot be read (no RBAC to get namespaces, logged by the
// watch), the cluster is on meshNetworks' network; a label removed gives
// it back, a namespace deleted does not (as in Istio). Its informer runs
// until stop is closed; shutdown then waits for it.
func (s *Source) watchSystemNamespace(stop <-chan struct{}) (shutdown func(), err error) {
	ns := s.cfg.SystemNamespace
	if ns == "" {
		return func() {}, nil
	}
	f := k8sinformers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0,
		k8sinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ns).String()
		}),
		k8sinformers.WithTransform(trimNamespace))
	inf := f.Core().V1().Namespaces().Informer()
	set := func(obj any) {
		if n, ok := obj.(*corev1.Namespace); ok && n.Name == ns {
			s.setNamespaceNetwork(n.Labels[model.NetworkLabel])
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		// A deleted namespace leaves the network it named, as in Istio.
	}); err != nil {
		return nil, fmt.Errorf("watch namespace %s: %w", ns, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(kubewatch.ErrorLogger(s.cfg.Logger, "namespaces")); err != nil {
		return nil, fmt.Errorf("watch namespace %s: %w", ns, err)
	}
	f.Start(stop)
	return f.Shutdown, nil
}

// trimNamespace keeps of a Namespace its name and its network label.
func trimNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	out := &corev1.Namespace{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
	if v, ok := n.Labels[model.NetworkLabel]; ok {
		out.Labels = map[string]string{model.NetworkLabel: v}
	}
	return out, nil
}

// setNamespaceNetwork makes network the label of the system namespace:
// every endpoint and pod whose own label names no network is placed again,
// in a rebuild of everything, as a meshNetworks change does.
func (s *Source) setNamespaceNetwork(network string) {
	if len(network) > maxNamespaceNetwork {
		s.cfg.Logger.Warn("network label of the system namespace ignored: too long",
			"namespace", s.cfg.SystemNamespace, "bytes", len(network), "limit", maxNamespaceNetwork)
		network = ""
	}
	s.mu.Lock()
	if network == s.nsNetwork {
		s.mu.Unlock()
		return
	}
	s.nsNetwork = network
	s.touched.all = true
	s.mu.Unlock()
	s.cfg.Logger.Info("cluster network from the system namespace's label", "namespace", s.cfg.SystemNamespace,
		"network", network)
	s.markDirty()
}

// maxNamespaceNetwork bounds the network a namespace label names (a label
// value is at most 63 bytes; this is meshNetworks' bound on a name).
const maxNamespaceNetwork = 253
