package webhookconfig

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// webhookPair makes a mutating and a validating configuration named after
// ns whose webhooks call url+"/inject" and url+"/validate". Their
// namespaceSelector only matches namespaces, so that tests sharing the
// apiserver do not call each other's webhooks.
func webhookPair(ns, url string, namespaces []string, injectLabel bool) (
	*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration,
) {
	ignore, fail := admissionregistrationv1.Ignore, admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(10)
	injectURL, validateURL := url+"/inject", url+"/validate"
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces,
	}}}
	injectSel := sel.DeepCopy()
	if injectLabel {
		injectSel.MatchLabels = map[string]string{"istio-injection": "enabled"}
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "namespace.sidecar-injector.istio.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &injectURL},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector:       injectSel,
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-validator-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "rev.validation.istio.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &validateURL},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"security.istio.io", "networking.istio.io"}, APIVersions: []string{"*"}, Resources: []string{"*"},
				},
			}},
			NamespaceSelector:       sel,
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	return m, v
}

// createPair creates both configurations and deletes them after the test.
func createPair(t *testing.T, env *testenv.Env, m *admissionregistrationv1.MutatingWebhookConfiguration,
	v *admissionregistrationv1.ValidatingWebhookConfiguration,
) {
	t.Helper()
	api := env.Client(t).AdmissionregistrationV1()
	ctx := t.Context()
	if _, err := api.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() {
		_ = api.MutatingWebhookConfigurations().Delete(context.Background(), m.Name, metav1.DeleteOptions{})
	})
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingWebhookConfigurations().Delete(context.Background(), v.Name, metav1.DeleteOptions{})
	})
}

func TestControllerOnAPIServer(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	// Nothing listens on port 1: these webhooks are only configured, never called.
	m, v := webhookPair(ns, "https://127.0.0.1:1", []string{ns + "-none"}, false)
	createPair(t, env, m, v)

	root1, root2 := catest.NewRoot(t).CertPEM, catest.NewRoot(t).CertPEM
	bundles := &fakeBundles{}
	bundles.set(string(root1))
	var ready atomic.Bool
	start(t, Config{Client: client, Bundles: bundles, MutatingName: m.Name, ValidatingName: v.Name, Ready: ready.Load})

	eventually(t, 30*time.Second, "caBundle patched into both configurations", func() bool {
		s := readState(t, client, m.Name, v.Name)
		return allEqual(s.mutatingCA, string(root1)) && allEqual(s.validatingCA, string(root1))
	})
	if s := readState(t, client, m.Name, v.Name); !allPolicies(s.validatingPolicy, "Ignore") {
		t.Fatalf("validating failurePolicy %q before ready, want Ignore", s.validatingPolicy)
	}

	// An edit by someone else is put back promptly.
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cur, err := api.Get(t.Context(), m.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Webhooks[0].ClientConfig.CABundle = root2
	if _, err := api.Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("edit caBundle: %v", err)
	}
	eventually(t, 2*time.Second, "edited caBundle reverted within 2s", func() bool {
		return allEqual(readState(t, client, m.Name, v.Name).mutatingCA, string(root1))
	})

	// A new bundle (a second root during rotation) reaches both.
	both := string(root1) + string(root2)
	bundles.set(both)
	eventually(t, 10*time.Second, "new bundle patched", func() bool {
		s := readState(t, client, m.Name, v.Name)
		return allEqual(s.mutatingCA, both) && allEqual(s.validatingCA, both)
	})

	ready.Store(true)
	eventually(t, 10*time.Second, "validating failurePolicy Fail after ready", func() bool {
		return allPolicies(readState(t, client, m.Name, v.Name).validatingPolicy, "Fail")
	})
	got, err := api.Get(t.Context(), m.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fm := managers(got.ManagedFields); !bytes.Contains([]byte(fm), []byte(FieldManager)) {
		t.Errorf("field managers %q do not include %q", fm, FieldManager)
	}
}

func managers(fields []metav1.ManagedFieldsEntry) string {
	var s string
	for _, f := range fields {
		s += f.Manager + " "
	}
	return s
}
