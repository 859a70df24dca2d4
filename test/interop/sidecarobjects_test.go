package interop

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	istioscheme "istio.io/client-go/pkg/clientset/versioned/scheme"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
)

// decodeYAMLDocs decodes every document of a multi-document YAML string into
// typed objects of scheme.
func decodeYAMLDocs(t testing.TB, scheme *runtime.Scheme, docs string) []runtime.Object {
	t.Helper()
	dec := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	var out []runtime.Object
	for i, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode YAML document %d: %v\n%s", i, err, doc)
		}
		out = append(out, obj)
	}
	return out
}

func decodeKube(t testing.TB, docs string) []runtime.Object {
	return decodeYAMLDocs(t, k8sscheme.Scheme, docs)
}

func decodeIstio(t testing.TB, docs string) []runtime.Object {
	return decodeYAMLDocs(t, istioscheme.Scheme, docs)
}

// meshObjects is sidecarWorld decoded, with the lookups the matrix of calls and
// the security expectations need. It is read straight from the objects,
// not from our model, so that a fault of the model shows.
type meshObjects struct {
	objects  []runtime.Object
	pods     map[string]*corev1.Pod // by "<namespace>/<name>"
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
}

func newMeshObjects(t *testing.T) *meshObjects {
	w := &meshObjects{objects: decodeKube(t, sidecarWorld), pods: map[string]*corev1.Pod{}}
	for _, o := range w.objects {
		switch o := o.(type) {
		case *corev1.Pod:
			w.pods[o.Namespace+"/"+o.Name] = o
		case *corev1.Service:
			w.services = append(w.services, o)
		case *discoveryv1.EndpointSlice:
			w.slices = append(w.slices, o)
		case *corev1.Node:
		default:
			t.Fatalf("sidecarWorld holds a %T", o)
		}
	}
	return w
}

func (w *meshObjects) pod(t *testing.T, key string) *corev1.Pod {
	t.Helper()
	p, ok := w.pods[key]
	if !ok {
		t.Fatalf("no pod %s in sidecarWorld", key)
	}
	return p
}

// fqdn is a service's host name.
func serviceFQDN(s *corev1.Service) string { return s.Name + "." + s.Namespace + ".svc.cluster.local" }

// servicesOf returns the services that select pod.
func (w *meshObjects) servicesOf(pod *corev1.Pod) []*corev1.Service {
	var out []*corev1.Service
	for _, s := range w.services {
		if s.Namespace == pod.Namespace && len(s.Spec.Selector) > 0 && labelsMatch(s.Spec.Selector, pod.Labels) {
			out = append(out, s)
		}
	}
	return out
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// endpointPods returns the pods the EndpointSlices of s name.
func (w *meshObjects) endpointPods(s *corev1.Service) []*corev1.Pod {
	var out []*corev1.Pod
	for _, sl := range w.slices {
		if sl.Namespace != s.Namespace || sl.Labels[discoveryv1.LabelServiceName] != s.Name {
			continue
		}
		for _, e := range sl.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				if p := w.pods[sl.Namespace+"/"+e.TargetRef.Name]; p != nil && !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// spiffeID is the identity Istio gives a pod.
func podSPIFFEID(p *corev1.Pod) string {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, p.Namespace, sa)
}

// appProtocol is how Istio reads a service port: "http", "http2" (gRPC
// too), "tcp", or "" when undeclared (Istio sniffs it).
func portProtocol(p corev1.ServicePort) string {
	name := p.Name
	if p.AppProtocol != nil {
		name = *p.AppProtocol
	}
	prefix, _, _ := strings.Cut(strings.ToLower(name), "-")
	switch prefix {
	case "http":
		return "http"
	case "http2", "grpc":
		return "http2"
	case "tcp", "tls", "https", "mysql", "mongo", "redis":
		return "tcp"
	}
	return ""
}

// targetPort is the numeric target port of a service port (all ports of
// sidecarWorld are numeric).
func numericTargetPort(p corev1.ServicePort) int {
	if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal != 0 {
		return int(p.TargetPort.IntVal)
	}
	return int(p.Port)
}
