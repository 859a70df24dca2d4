package testenv_test

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// TestValidatingWebhookIsCalled registers a URL webhook on loopback, the way
// istiod's /validate and /inject are reached in these tests.
func TestValidatingWebhookIsCalled(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	client := env.Client(t)
	ctx := t.Context()

	var calls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
			return
		}
		allowed := !strings.HasPrefix(review.Request.Name, "forbidden")
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: allowed}
		if !allowed {
			review.Response.Result = &metav1.Status{Message: "names starting with forbidden are refused"}
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)

	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := srv.URL + "/validate"
	timeout := int32(5)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "testenv-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.testenv.bulwark-mesh.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      &url,
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
				},
			}},
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	webhooks := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := webhooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create webhook configuration: %v", err)
	}
	t.Cleanup(func() { _ = webhooks.Delete(t.Context(), cfg.Name, metav1.DeleteOptions{}) })

	// The apiserver picks the configuration up from an informer.
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("forbidden-%d", i)},
		}, metav1.CreateOptions{})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "names starting with forbidden are refused") {
		t.Fatalf("create refused configmap: err = %v, want the webhook's refusal", err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "allowed"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create allowed configmap: %v", err)
	}
	if calls.Load() < 2 {
		t.Errorf("webhook called %d times, want at least 2", calls.Load())
	}
}
