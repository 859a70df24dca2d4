// Package admission holds what every istiod admission webhook shares: the
// AdmissionReview envelope (admission.k8s.io v1 and v1beta1) and the
// hardening of its HTTP handling. Only POST with Content-Type
// application/json is accepted (405, 415), bodies are capped (413),
// malformed reviews are refused with a message (400), the response echoes
// the request's UID and apiVersion, and a panic answers 500 without taking
// istiod down.
package admission

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

// MaxRequestBytes caps an AdmissionReview body.
const MaxRequestBytes = 6 << 20

// The AdmissionReview versions served; the answer uses the request's.
const (
	APIVersionV1      = "admission.k8s.io/v1"
	APIVersionV1beta1 = "admission.k8s.io/v1beta1"
)

// Review is the envelope shared by admission.k8s.io v1 and v1beta1; the
// request and response bodies have the same JSON shape in both.
type Review struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Request    *admissionv1.AdmissionRequest  `json:"request,omitempty"`
	Response   *admissionv1.AdmissionResponse `json:"response,omitempty"`
}

// Serve answers one admission HTTP request with admit, named name in logs.
// The caller has already matched the path.
func Serve(w http.ResponseWriter, r *http.Request, name string, log *slog.Logger,
	admit func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	defer func() {
		if p := recover(); p != nil {
			log.Error(name+": panic while handling admission request", "panic", fmt.Sprint(p))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
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
	in, err := Decode(body)
	if err != nil {
		http.Error(w, "bad AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := admit(in.Request)
	resp.UID = in.Request.UID
	out, err := json.Marshal(Review{APIVersion: in.APIVersion, Kind: "AdmissionReview", Response: resp})
	if err != nil {
		log.Error(name+": encode AdmissionReview response", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Decode parses an AdmissionReview and checks its envelope.
func Decode(body []byte) (*Review, error) {
	var in Review
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	switch in.APIVersion {
	case APIVersionV1, APIVersionV1beta1:
	default:
		return nil, fmt.Errorf("apiVersion %.60q is not %s or %s", in.APIVersion, APIVersionV1, APIVersionV1beta1)
	}
	if in.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("kind %.60q is not AdmissionReview", in.Kind)
	}
	if in.Request == nil {
		return nil, errors.New("no request")
	}
	return &in, nil
}

// Deny refuses a request with msg as the reason the user sees.
func Deny(msg string) *admissionv1.AdmissionResponse {
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
