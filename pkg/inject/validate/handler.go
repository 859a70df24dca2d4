package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRequestBytes bounds an AdmissionReview body, as for /inject.
const MaxRequestBytes = 6 << 20

const (
	apiVersionV1      = "admission.k8s.io/v1"
	apiVersionV1beta1 = "admission.k8s.io/v1beta1"
)

type handler struct {
	log *slog.Logger
	// validate checks one object; tests replace it.
	validate func(k kind, raw []byte) error
}

// NewHandler serves the validating webhook on POST /validate and /validate/.
func NewHandler(logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &handler{log: logger, validate: validateObject}
}

// review is the envelope shared by admission.k8s.io v1 and v1beta1.
type review struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Request    *admissionv1.AdmissionRequest  `json:"request,omitempty"`
	Response   *admissionv1.AdmissionResponse `json:"response,omitempty"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("validate: panic while handling admission request", "panic", fmt.Sprint(p))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	if r.URL.Path != "/validate" && r.URL.Path != "/validate/" {
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
	resp := h.admit(in.Request)
	resp.UID = in.Request.UID
	out, err := json.Marshal(review{APIVersion: in.APIVersion, Kind: "AdmissionReview", Response: resp})
	if err != nil {
		h.log.Error("validate: encode AdmissionReview response", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
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

// admit validates creations and updates of the kinds this webhook knows;
// anything else is allowed.
func (h *handler) admit(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allowed := &admissionv1.AdmissionResponse{Allowed: true}
	switch req.Operation {
	case "", admissionv1.Create, admissionv1.Update:
	default:
		return allowed
	}
	if req.SubResource != "" {
		// A status write carries the stored spec; refusing it would only
		// stop istiod reporting on an object admitted before this webhook.
		return allowed
	}
	k, ok := lookupKind(req.Kind.Group, req.Kind.Version, req.Kind.Kind)
	if !ok {
		return allowed
	}
	if err := h.validate(k, req.Object.Raw); err != nil {
		h.log.Info("validate: refused", "kind", k.name, "namespace", req.Namespace, "name", req.Name, "reason", err.Error())
		return deny(err.Error())
	}
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
