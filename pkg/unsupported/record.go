package unsupported

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// record is what the informers cache of an object: its name and version,
// and what Bulwark ignores of it. Nothing else of the object is kept.
type record struct {
	metav1.ObjectMeta // name, namespace, generation and resource version only
	// ignored is shared by every record of a kind not read at all.
	ignored []string
}

var _ runtime.Object = (*record)(nil)

func (r *record) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (r *record) DeepCopyObject() runtime.Object {
	c := &record{ignored: slices.Clone(r.ignored)}
	r.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

func (r *record) ref() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// sameAs says whether o is r unchanged as far as a report goes: the same
// spec generation and the same ignored fields. A resync, or a status
// write, is no change.
func (r *record) sameAs(o *record) bool {
	return r.Generation == o.Generation && slices.Equal(r.ignored, o.ignored)
}

// transform makes the informer's object a record. It is idempotent, as
// informers require: a record, or a tombstone, passes unchanged.
func (w *watch) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		spec, _ := o.Object["spec"].(map[string]any)
		return newRecord(o, w.kind.Ignored(o.GetAnnotations(), spec)), nil
	case *metav1.PartialObjectMetadata:
		return newRecord(o, w.whole), nil
	}
	return obj, nil
}

func newRecord(o metav1.Object, ignored []string) *record {
	return &record{
		ObjectMeta: metav1.ObjectMeta{
			Name:            o.GetName(),
			Namespace:       o.GetNamespace(),
			Generation:      o.GetGeneration(),
			ResourceVersion: o.GetResourceVersion(),
		},
		ignored: ignored,
	}
}
