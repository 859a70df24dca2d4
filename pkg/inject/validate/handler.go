package validate

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	"github.com/bulwark-mesh/bulwark/pkg/policy"

	admissionv1 "k8s.io/api/admission/v1"
)

// MaxRequestBytes bounds an AdmissionReview body. kube-apiserver objects are
// at most ~1.5 MiB in etcd; 6 MiB leaves room for the JSON envelope.
const MaxRequestBytes = admission.MaxRequestBytes

type handler struct {
	log   *slog.Logger
	rules rules
	// validate checks one object; tests replace it.
	validate func(k kind, raw []byte) ([]string, error)
}

// Option configures the handler.
type Option func(*handler)

// AllowLoopbackHTTPJWKS admits RequestAuthentication rules whose key set
// istiod would fetch over plain http from a loopback host, when istiod is
// run to fetch them (--allow-loopback-http-jwks); by default they are
// refused, as istiod would refuse to fetch them.
func AllowLoopbackHTTPJWKS(allow bool) Option {
	return func(h *handler) { h.rules.jwksURLs.LoopbackHTTP = allow }
}

// AllowInsecureSkipVerify admits DestinationRules whose SIMPLE or MUTUAL
// TLS skips verifying the server, when istiod is run to apply them
// (--allow-insecure-skip-verify); by default they are refused, as
// istiod's generators would refuse them.
func AllowInsecureSkipVerify(allow bool) Option {
	return func(h *handler) { h.rules.origination.AllowInsecureSkipVerify = allow }
}

// NewHandler serves the validating webhook on POST /validate and /validate/.
func NewHandler(logger *slog.Logger, opts ...Option) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{log: logger}
	for _, o := range opts {
		o(h)
	}
	h.validate = func(k kind, raw []byte) ([]string, error) { return validateObject(k, raw, h.rules) }
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/validate" && r.URL.Path != "/validate/" {
		http.NotFound(w, r)
		return
	}
	admission.Serve(w, r, "validate", h.log, h.admit)
}

// admit validates creations and updates of the kinds this webhook knows,
// and warns about what Bulwark ignores of any Istio or Gateway API object
// (package policy); anything else is allowed.
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
	var checked []string
	if k, ok := lookupKind(req.Kind.Group, req.Kind.Version, req.Kind.Kind); ok {
		warns, err := h.validate(k, req.Object.Raw)
		if err != nil {
			h.log.Info("validate: refused", "kind", k.name, "namespace", req.Namespace, "name", req.Name, "reason", err.Error())
			return deny(err.Error())
		}
		checked = warns
	}
	if k, ok := policy.Lookup(req.Kind.Group, req.Kind.Kind); ok {
		allowed.Warnings = warnings(k, req.Object.Raw)
	}
	// Istio's warnings of the object, then what Bulwark ignores of it.
	if len(checked) > maxWarnings {
		checked = append(checked[:maxWarnings:maxWarnings], fmt.Sprintf("and %d more warnings", len(checked)-maxWarnings))
	}
	allowed.Warnings = append(checked, allowed.Warnings...)
	return allowed
}

func deny(msg string) *admissionv1.AdmissionResponse { return admission.Deny(msg) }
