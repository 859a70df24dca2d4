package inject

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// MaxRequestBytes bounds an AdmissionReview body. kube-apiserver objects are
// at most ~1.5 MiB in etcd; 6 MiB leaves room for the JSON envelope.
const MaxRequestBytes = admission.MaxRequestBytes

// NamespaceLabelsFunc returns the labels of a namespace, or nil if unknown.
type NamespaceLabelsFunc func(namespace string) map[string]string

// HandlerOption configures NewHandler.
type HandlerOption func(*handler)

// WithNamespaceLabels lets the handler see namespace labels (for example
// from an informer); without it they are unknown and the webhook's
// namespaceSelector alone decides which namespaces are sent here.
func WithNamespaceLabels(f NamespaceLabelsFunc) HandlerOption {
	return func(h *handler) { h.nsLabels = f }
}

// WithMeshConfig gives the handler the mesh configuration istiod watches;
// each request reads the one current then (see Params.Mesh).
func WithMeshConfig(current func() *meshv1alpha1.MeshConfig) HandlerOption {
	return func(h *handler) { h.mesh = current }
}

type handler struct {
	store    *Store
	log      *slog.Logger
	nsLabels NamespaceLabelsFunc
	mesh     func() *meshv1alpha1.MeshConfig
}

// NewHandler serves the mutating webhook on POST /inject, /inject/ and
// /inject/cluster/<id>/net/<network>.
func NewHandler(store *Store, logger *slog.Logger, opts ...HandlerOption) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{store: store, log: logger}
	for _, o := range opts {
		o(h)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cluster, network, ok := parseInjectPath(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	admission.Serve(w, r, "inject", h.log, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return h.admit(req, cluster, network)
	})
}

// parseInjectPath accepts /inject, /inject/ and
// /inject/cluster/<id>/net/<network>.
func parseInjectPath(p string) (cluster, network string, ok bool) {
	switch p {
	case "/inject", "/inject/":
		return "", "", true
	}
	rest, found := strings.CutPrefix(p, "/inject/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	if len(parts) != 4 || parts[0] != "cluster" || parts[2] != "net" {
		return "", "", false
	}
	if validateLabelValue(parts[1]) != nil || validateLabelValue(parts[3]) != nil {
		return "", "", false
	}
	return parts[1], parts[3], true
}

// admit turns one AdmissionRequest into a response. Only pod creations are
// mutated; anything else is allowed unchanged.
func (h *handler) admit(req *admissionv1.AdmissionRequest, cluster, network string) *admissionv1.AdmissionResponse {
	allowed := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" || (req.Operation != "" && req.Operation != admissionv1.Create) {
		return allowed
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(fmt.Sprintf("decode pod: %s", err.Error()))
	}
	snap := h.store.Load()
	params := Params{
		Namespace: req.Namespace, Config: snap.Config, Values: snap.Values,
		ClusterID: cluster, Network: network,
	}
	if h.mesh != nil {
		params.Mesh = h.mesh()
	}
	if h.nsLabels != nil {
		params.NamespaceLabels = h.nsLabels(firstNonEmpty(pod.Namespace, req.Namespace))
	}
	res, err := Inject(&pod, params)
	name := firstNonEmpty(pod.Name, pod.GenerateName)
	if err != nil {
		h.log.Info("inject: denied", "namespace", req.Namespace, "pod", name, "error", err)
		return deny(err.Error())
	}
	h.log.Debug("inject: decided", "namespace", req.Namespace, "pod", name, "injected", res.Injected, "reason", res.Reason)
	if !res.Injected || len(res.Patch) == 0 {
		return allowed
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return deny("encode patch failed")
	}
	pt := admissionv1.PatchTypeJSONPatch
	allowed.Patch = patch
	allowed.PatchType = &pt
	return allowed
}

func deny(msg string) *admissionv1.AdmissionResponse { return admission.Deny(msg) }
