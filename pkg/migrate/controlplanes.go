package migrate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
)

// Labels as Istio's and Bulwark's charts set them.
const (
	labelRev           = "istio.io/rev"
	labelTag           = "istio.io/tag"
	labelInjection     = "istio-injection"
	labelPartOf        = "app.kubernetes.io/part-of"
	partOfBulwark      = "bulwark"
	injectorSuffix     = "sidecar-injector.istio.io"
	defaultRevision    = "default"
	defaultTrustDomain = "cluster.local"
)

// ControlPlane is an istiod Deployment.
type ControlPlane struct {
	Namespace, Name string
	Revision        string
	// Bulwark is true for Bulwark's chart's Deployment.
	Bulwark bool
	// TrustDomain is the mesh config's, for Istio's istiod.
	TrustDomain string
	// MeshIgnored are the fields of Istio's istiod's mesh config that
	// Bulwark does not act on (meshconfig.NotHonoured); MeshRefused is why
	// Bulwark would refuse that mesh config, if it would.
	MeshIgnored []string
	MeshRefused string
}

// Webhook is a MutatingWebhookConfiguration that injects sidecars.
type Webhook struct {
	Name string
	// Revisions are the istio.io/rev values it answers for (a tag's name
	// for a revision tag); InjectionLabel is true when it answers for
	// istio-injection=enabled.
	Revisions      []string
	InjectionLabel bool
	// Service is the service called, namespace/name, or the URL.
	Service string
	Bulwark bool
}

// Namespace is a namespace labelled for injection.
type Namespace struct {
	Name string
	// Label is the label that selects injection, as key=value.
	Label string
	// Revision is the revision it asks for ("" for istio-injection=disabled).
	Revision string
	// Injectors are the webhooks that answer for it.
	Injectors []string
}

func listControlPlanes(ctx context.Context, client kubernetes.Interface) ([]ControlPlane, error) {
	deps, err := client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	if err != nil {
		return nil, fmt.Errorf("list istiod deployments: %w", err)
	}
	var out []ControlPlane
	for _, d := range deps.Items {
		cp := ControlPlane{
			Namespace: d.Namespace, Name: d.Name,
			Revision: cmp.Or(d.Labels[labelRev], defaultRevision),
			Bulwark:  d.Labels[labelPartOf] == partOfBulwark,
		}
		if !cp.Bulwark {
			if err := readIstioMesh(ctx, client, &cp); err != nil {
				return nil, err
			}
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b ControlPlane) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// maxMeshSize bounds the mesh config read.
const maxMeshSize = 1 << 20

// readIstioMesh reads the mesh ConfigMap of Istio's revision (istio, or
// istio-<revision>) into cp: its trust domain, and what of it Bulwark would
// ignore or refuse. Without one istiod runs on Istio's defaults.
func readIstioMesh(ctx context.Context, client kubernetes.Interface, cp *ControlPlane) error {
	name := "istio"
	if cp.Revision != defaultRevision {
		name += "-" + cp.Revision
	}
	cp.TrustDomain = defaultTrustDomain // Istio's default mesh config
	cm, err := client.CoreV1().ConfigMaps(cp.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("read mesh config %s/%s: %w", cp.Namespace, name, err)
	}
	raw := cm.Data["mesh"]
	if len(raw) > maxMeshSize {
		return fmt.Errorf("mesh config %s/%s: larger than %d bytes", cp.Namespace, name, maxMeshSize)
	}
	var mesh struct {
		TrustDomain string `json:"trustDomain"`
	}
	if err := yaml.Unmarshal([]byte(raw), &mesh); err != nil {
		return fmt.Errorf("mesh config %s/%s: %w", cp.Namespace, name, err)
	}
	cp.TrustDomain = cmp.Or(mesh.TrustDomain, defaultTrustDomain)
	mc, _, err := meshconfig.Parse([]byte(raw), meshconfig.Defaults{})
	if err != nil {
		cp.MeshRefused = err.Error()
		return nil
	}
	cp.MeshIgnored = meshconfig.NotHonoured(mc)
	return nil
}

func listWebhooks(ctx context.Context, client kubernetes.Interface) ([]Webhook, error) {
	list, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list mutating webhooks: %w", err)
	}
	var out []Webhook
	for _, mwc := range list.Items {
		wh, ok := injectorOf(&mwc)
		if ok {
			out = append(out, wh)
		}
	}
	slices.SortFunc(out, func(a, b Webhook) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// injectorOf reads what an injection webhook configuration answers for
// from its selectors, as Istio's chart writes them: istio.io/rev In
// [<revision or tag>] on namespaces or pods, istio-injection In [enabled]
// on namespaces.
func injectorOf(mwc *admissionv1.MutatingWebhookConfiguration) (Webhook, bool) {
	wh := Webhook{Name: mwc.Name, Bulwark: mwc.Labels[labelPartOf] == partOfBulwark}
	found := false
	for _, w := range mwc.Webhooks {
		if !strings.HasSuffix(w.Name, injectorSuffix) {
			continue
		}
		found = true
		if s := w.ClientConfig.Service; s != nil && wh.Service == "" {
			wh.Service = s.Namespace + "/" + s.Name
		} else if u := w.ClientConfig.URL; u != nil && wh.Service == "" {
			wh.Service = *u
		}
		for _, sel := range []*metav1.LabelSelector{w.NamespaceSelector, w.ObjectSelector} {
			if sel == nil {
				continue
			}
			for _, e := range sel.MatchExpressions {
				if e.Operator != metav1.LabelSelectorOpIn {
					continue
				}
				switch {
				case e.Key == labelRev:
					wh.Revisions = append(wh.Revisions, e.Values...)
				case e.Key == labelInjection && sel == w.NamespaceSelector && slices.Contains(e.Values, "enabled"):
					wh.InjectionLabel = true
				}
			}
		}
	}
	slices.Sort(wh.Revisions)
	wh.Revisions = slices.Compact(wh.Revisions)
	return wh, found
}

// answers reports whether wh injects into a namespace labelled label=value.
func (wh Webhook) answers(label, value string) bool {
	if label == labelInjection {
		return value == "enabled" && wh.InjectionLabel
	}
	return slices.Contains(wh.Revisions, value)
}

func listNamespaces(ctx context.Context, client kubernetes.Interface, webhooks []Webhook) ([]Namespace, error) {
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []Namespace
	for _, n := range list.Items {
		if n.DeletionTimestamp != nil {
			continue // going: its pods are not moved
		}
		var ns Namespace
		// istio-injection wins over istio.io/rev, as the webhooks'
		// selectors make it.
		if v, ok := n.Labels[labelInjection]; ok {
			ns = Namespace{Name: n.Name, Label: labelInjection + "=" + v}
			if v == "enabled" {
				ns.Revision = defaultRevision
			}
			for _, wh := range webhooks {
				if wh.answers(labelInjection, v) {
					ns.Injectors = append(ns.Injectors, wh.Name)
				}
			}
		} else if v, ok := n.Labels[labelRev]; ok {
			ns = Namespace{Name: n.Name, Label: labelRev + "=" + v, Revision: v}
			for _, wh := range webhooks {
				if wh.answers(labelRev, v) {
					ns.Injectors = append(ns.Injectors, wh.Name)
				}
			}
		} else {
			continue
		}
		out = append(out, ns)
	}
	return out, nil
}
