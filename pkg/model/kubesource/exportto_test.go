package kubesource

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// A Service keeps its exportTo annotation through the informer's
// transform, and only it; the model reads it as the Service's ExportTo.
func TestServiceExportToIsRead(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: "s", Namespace: "a",
		Annotations:   map[string]string{model.ExportToAnnotation: "., b", "big": "value"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	out, err := transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := out.(*corev1.Service)
	if want := map[string]string{model.ExportToAnnotation: "., b"}; !maps.Equal(trimmed.Annotations, want) || trimmed.ManagedFields != nil {
		t.Errorf("annotations %v, managed fields %v", trimmed.Annotations, trimmed.ManagedFields)
	}
	if got := convertService(trimmed).ExportTo; !slices.Equal(got, []string{".", "b"}) {
		t.Errorf("ExportTo %q", got)
	}
	plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "a", Annotations: map[string]string{"big": "value"}}}
	if out, _ := transform(plain); out.(*corev1.Service).Annotations != nil || convertService(plain).ExportTo != nil {
		t.Errorf("a Service without exportTo: annotations %v", out.(*corev1.Service).Annotations)
	}
}

// A Service keeps Istio's node selector through the informer's transform,
// which makes a NodePort Service a NodePort gateway.
func TestServiceNodeSelectorIsKept(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "istio-system",
		Annotations: map[string]string{model.NodeSelectorAnnotation: `{"gw": "yes"}`, "big": "value"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 15443, NodePort: 31443}}}}
	out, err := transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{model.NodeSelectorAnnotation: `{"gw": "yes"}`}; !maps.Equal(out.(*corev1.Service).Annotations, want) {
		t.Errorf("annotations %v, want %v", out.(*corev1.Service).Annotations, want)
	}
	if e := exposuresOf(out.(*corev1.Service), "c", testNodes); len(e) != 1 || !e[0].NodePort {
		t.Errorf("exposures %+v, want a NodePort gateway's", e)
	}
}
