package rootcert

import (
	"context"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reconcile makes istio-ca-root-cert in ns hold the current bundle. It
// reads from the caches and writes only when the ConfigMap is missing or
// differs. Namespaces being deleted are left alone: the API server refuses
// new objects in them, and fighting that only fills the logs.
func (c *Controller) reconcile(ctx context.Context, ns string) error {
	b := c.bundle.Load()
	if b == nil || c.excluded(ns) {
		return nil
	}
	n, err := c.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get namespace %s: %w", ns, err)
	}
	if terminating(n) {
		return nil
	}
	want := string(b.PEM)
	cm, err := c.configMaps.ConfigMaps(ns).Get(ConfigMapName)
	if apierrors.IsNotFound(err) {
		return c.create(ctx, ns, want)
	}
	if err != nil {
		return fmt.Errorf("get configmap %s/%s: %w", ns, ConfigMapName, err)
	}
	if upToDate(cm, want) {
		return nil
	}
	return c.update(ctx, cm, want, true)
}

func (c *Controller) create(ctx context.Context, ns, pem string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ConfigMapName,
			Namespace: ns,
			Labels:    map[string]string{ConfigLabel: "true"},
		},
		Data: map[string]string{DataKey: pem},
	}
	_, err := c.cfg.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.log.Debug("created configmap", "namespace", ns)
		return nil
	case apierrors.IsAlreadyExists(err):
		return c.reconcileLive(ctx, ns, pem)
	case goneOrTerminating(err):
		return nil
	}
	return fmt.Errorf("create configmap %s/%s: %w", ns, ConfigMapName, err)
}

// reconcileLive repeats the comparison with the ConfigMap read from the API
// server, for when a write shows that the cache is behind.
func (c *Controller) reconcileLive(ctx context.Context, ns, pem string) error {
	cm, err := c.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("configmap %s/%s vanished during create; retrying", ns, ConfigMapName)
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", ns, ConfigMapName, err)
	case upToDate(cm, pem):
		return nil
	}
	return c.update(ctx, cm, pem, false)
}

// update writes the bundle and the label into cm, keeping anything else
// others put there. On a conflict with a cached cm it reads the live one
// and tries once more.
func (c *Controller) update(ctx context.Context, cm *corev1.ConfigMap, pem string, cached bool) error {
	cm = cm.DeepCopy()
	cm.Data = maps.Clone(cm.Data)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[DataKey] = pem
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[ConfigLabel] = "true"
	_, err := c.cfg.Client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	switch {
	case err == nil:
		c.log.Info("repaired configmap", "namespace", cm.Namespace)
		return nil
	case goneOrTerminating(err):
		// Deleted meanwhile: its delete event brings the namespace back.
		return nil
	case apierrors.IsConflict(err) && cached:
		return c.reconcileLive(ctx, cm.Namespace, pem)
	}
	return fmt.Errorf("update configmap %s/%s: %w", cm.Namespace, ConfigMapName, err)
}

// upToDate reports whether cm holds the bundle pem. The same certificates
// in other bytes count: Istio's istiod, running beside Bulwark while a
// mesh moves, writes the root file of a plugged-in CA as the operator
// gave it, and rewriting each other's bytes would never end.
func upToDate(cm *corev1.ConfigMap, pem string) bool {
	v, ok := cm.Data[DataKey]
	return ok && sameCertificates(v, pem) && cm.Labels[ConfigLabel] == "true"
}

// sameCertificates reports whether two PEM bundles hold the same set of
// certificates and nothing else but text between them.
func sameCertificates(a, b string) bool {
	if a == b {
		return true
	}
	as, aok := certificateSet(a)
	bs, bok := certificateSet(b)
	return aok && bok && slices.Equal(as, bs)
}

// certificateSet is the sorted, deduplicated DER of each CERTIFICATE block
// of bundle; false when it holds another kind of block or none.
func certificateSet(bundle string) ([]string, bool) {
	rest := []byte(bundle)
	var out []string
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, false
		}
		out = append(out, string(block.Bytes))
	}
	slices.Sort(out)
	return slices.Compact(out), len(out) > 0
}

func terminating(n *corev1.Namespace) bool {
	return n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating
}

// goneOrTerminating reports a write refused because the object or its
// namespace is gone, or because the namespace is being deleted.
func goneOrTerminating(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
