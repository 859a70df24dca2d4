package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRequestBytes bounds an AdmissionReview body. kube-apiserver objects are
// at most ~1.5 MiB in etcd; 6 MiB leaves room for the JSON envelope.
const MaxRequestBytes = 6 << 20

const (
	apiVersionV1      = "admission.k8s.io/v1"
	apiVersionV1beta1 = "admission.k8s.io/v1beta1"
)

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

type handler struct {
	store    *Store
	log      *slog.Logger
	nsLabels NamespaceLabelsFunc
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

// review is the envelope shared by admission.k8s.io v1 and v1beta1; the
// request and response bodies have the same JSON shape in both.
type review struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Request    *admissionv1.AdmissionRequest  `json:"request,omitempty"`
	Response   *admissionv1.AdmissionResponse `json:"response,omitempty"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("inject: panic while handling admission request", "panic", fmt.Sprint(p))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	cluster, network, ok := parseInjectPath(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "unsupported media type: want application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body over %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read request body failed", http.StatusBadRequest)
		return
	}
	in, err := decodeReview(body)
	if err != nil {
		http.Error(w, "bad AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := h.admit(in.Request, cluster, network)
	resp.UID = in.Request.UID
	out, err := json.Marshal(review{APIVersion: in.APIVersion, Kind: "AdmissionReview", Response: resp})
	if err != nil {
		h.log.Error("inject: encode AdmissionReview response", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
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

func decodeReview(body []byte) (*review, error) {
	var in review
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	switch in.APIVersion {
	case apiVersionV1, apiVersionV1beta1:
	default:
		return nil, fmt.Errorf("apiVersion %.60q is not %s or %s", in.APIVersion, apiVersionV1, apiVersionV1beta1)
	}
	if in.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("kind %.60q is not AdmissionReview", in.Kind)
	}
	if in.Request == nil {
		return nil, errors.New("no request")
	}
	return &in, nil
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

func deny(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Message: msg,
			Reason:  metav1.StatusReasonBadRequest,
			Code:    http.StatusBadRequest,
		},
	}
}
