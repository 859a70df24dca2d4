package helm

import (
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// clusterScoped are the kinds the chart renders without a namespace.
var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
	"CustomResourceDefinition": true,
}

// objectKey names an object the way the API server does.
func objectKey(u *unstructured.Unstructured) string {
	if clusterScoped[u.GetKind()] {
		return u.GetKind() + "/" + u.GetName()
	}
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// ofKind returns the rendered objects of one kind.
func ofKind(r *Rendered, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range r.Objects {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// toTyped converts u into its client-go type, failing on fields the type
// does not have (a misspelt key would otherwise be dropped by the API server).
func toTyped(u *unstructured.Unstructured) (runtime.Object, error) {
	obj, err := scheme.Scheme.New(u.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true); err != nil {
		return nil, fmt.Errorf("%s: %w", objectKey(u), err)
	}
	return obj, nil
}

// only returns the one object of type T, or stops the test.
// only returns istiod's object of kind, the one the release renders for
// istiod itself (the remote reader's, labelled app=istio-reader, are
// checked apart: see reader).
func only[T runtime.Object](t *testing.T, r *Rendered, kind string) T {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, u := range ofKind(r, kind) {
		if !isReader(u) {
			objs = append(objs, u)
		}
	}
	return one[T](t, kind, objs)
}

// reader returns the remote reader's object of kind.
func reader[T runtime.Object](t *testing.T, r *Rendered, kind string) T {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, u := range ofKind(r, kind) {
		if isReader(u) {
			objs = append(objs, u)
		}
	}
	return one[T](t, kind, objs)
}

func isReader(u *unstructured.Unstructured) bool { return u.GetLabels()["app"] == "istio-reader" }

func one[T runtime.Object](t *testing.T, kind string, objs []*unstructured.Unstructured) T {
	t.Helper()
	if len(objs) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(objs), kind)
	}
	obj, err := toTyped(objs[0])
	if err != nil {
		t.Fatal(err)
	}
	typed, ok := obj.(T)
	if !ok {
		t.Fatalf("%s is %T", kind, obj)
	}
	return typed
}

func deployment(t *testing.T, r *Rendered) *appsv1.Deployment {
	t.Helper()
	return only[*appsv1.Deployment](t, r, "Deployment")
}

func mutatingWebhook(t *testing.T, r *Rendered) *admissionv1.MutatingWebhookConfiguration {
	t.Helper()
	return only[*admissionv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration")
}

func validatingWebhook(t *testing.T, r *Rendered) *admissionv1.ValidatingWebhookConfiguration {
	t.Helper()
	return only[*admissionv1.ValidatingWebhookConfiguration](t, r, "ValidatingWebhookConfiguration")
}

// configMap returns the named ConfigMap's data, or stops the test.
func configMap(t *testing.T, r *Rendered, name string) map[string]string {
	t.Helper()
	for _, u := range ofKind(r, "ConfigMap") {
		if u.GetName() != name {
			continue
		}
		obj, err := toTyped(u)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.ConfigMap).Data
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}
