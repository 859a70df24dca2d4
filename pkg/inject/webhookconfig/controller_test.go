package webhookconfig

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

const (
	injector  = "istio-sidecar-injector"
	validator = "istio-validator-istio-system"
	wait      = 10 * time.Second
)

func TestCABundleIsPatchedIntoEveryWebhook(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(
		mutatingConfig(injector, "a.sidecar-injector.istio.io", "b.sidecar-injector.istio.io"),
		validatingConfig(validator, "rev.validation.istio.io", "other.validation.istio.io"),
		mutatingConfig("someone-else", "x.example.com"),
	)
	bundles := &fakeBundles{}
	bundles.set("root-1")
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector, ValidatingName: validator})

	eventually(t, wait, "every webhook has the bundle", func() bool {
		s := readState(t, client, injector, validator)
		return allEqual(s.mutatingCA, "root-1") && allEqual(s.validatingCA, "root-1")
	})
	if s := readState(t, client, "someone-else", ""); !allEqual(s.mutatingCA, "old") {
		t.Errorf("another configuration was changed: %q", s.mutatingCA)
	}
}

func TestEditsAreReverted(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(mutatingConfig(injector, "a"), validatingConfig(validator, "v"))
	waitWatches := countWatches(client)
	bundles := &fakeBundles{}
	bundles.set("root-1")
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector, ValidatingName: validator})
	eventually(t, wait, "bundle patched", func() bool {
		s := readState(t, client, injector, validator)
		return allEqual(s.mutatingCA, "root-1") && allEqual(s.validatingCA, "root-1")
	})
	waitWatches(t, 2)

	api := client.AdmissionregistrationV1()
	m, err := api.MutatingWebhookConfigurations().Get(context.Background(), injector, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Webhooks[0].ClientConfig.CABundle = []byte("attacker")
	if _, err := api.MutatingWebhookConfigurations().Update(context.Background(), m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := api.ValidatingWebhookConfigurations().Get(context.Background(), validator, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := api.ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "edits reverted", func() bool {
		s := readState(t, client, injector, validator)
		return allEqual(s.mutatingCA, "root-1") && allEqual(s.validatingCA, "root-1")
	})
}

func TestBundleChangeIsApplied(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(mutatingConfig(injector, "a"), validatingConfig(validator, "v"))
	bundles := &fakeBundles{}
	bundles.set("root-1")
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector, ValidatingName: validator})
	eventually(t, wait, "first bundle patched", func() bool {
		return allEqual(readState(t, client, injector, validator).mutatingCA, "root-1")
	})
	bundles.set("root-1root-2")
	eventually(t, wait, "second bundle patched", func() bool {
		s := readState(t, client, injector, validator)
		return allEqual(s.mutatingCA, "root-1root-2") && allEqual(s.validatingCA, "root-1root-2")
	})
}

func TestFailurePolicyFlipsOnlyAfterReady(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(mutatingConfig(injector, "a"), validatingConfig(validator, "v1", "v2"))
	waitWatches := countWatches(client)
	bundles := &fakeBundles{}
	bundles.set("root-1")
	var ready atomic.Bool
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector, ValidatingName: validator, Ready: ready.Load})

	eventually(t, wait, "bundle patched", func() bool {
		return allEqual(readState(t, client, injector, validator).validatingCA, "root-1")
	})
	// A bundle change while not ready still leaves the policy alone.
	bundles.set("root-2")
	eventually(t, wait, "second bundle patched", func() bool {
		return allEqual(readState(t, client, injector, validator).validatingCA, "root-2")
	})
	if s := readState(t, client, injector, validator); !allPolicies(s.validatingPolicy, "Ignore") {
		t.Fatalf("failurePolicy %q before ready, want Ignore", s.validatingPolicy)
	}

	ready.Store(true)
	eventually(t, wait, "failurePolicy Fail after ready", func() bool {
		return allPolicies(readState(t, client, injector, validator).validatingPolicy, "Fail")
	})
	if s := readState(t, client, injector, validator); !allPolicies(s.mutatingPolicy, "Ignore") {
		t.Errorf("mutating failurePolicy changed to %q", s.mutatingPolicy)
	}

	// Once ready, a later downgrade is put back.
	waitWatches(t, 2)
	api := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	v, err := api.Get(context.Background(), validator, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ignore := admissionregistrationv1.Ignore
	v.Webhooks[1].FailurePolicy = &ignore
	if _, err := api.Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "failurePolicy Fail restored", func() bool {
		return allPolicies(readState(t, client, injector, validator).validatingPolicy, "Fail")
	})
}

func TestMissingConfigurationIsPatchedOnceCreated(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	waitWatches := countWatches(client)
	bundles := &fakeBundles{}
	bundles.set("root-1")
	var gets atomic.Int32
	client.PrependReactor("get", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	logs := &logtest.Buffer{}
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector, ValidatingName: validator,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	// Several reconciles while the configuration is missing log it once.
	for i := range 3 {
		before := gets.Load()
		bundles.set(fmt.Sprintf("root-%d", i+1))
		eventually(t, wait, "controller looked for the configuration", func() bool { return gets.Load() > before })
	}
	if n := strings.Count(logs.String(), "waiting for webhook configuration to be created"); n != 2 {
		t.Errorf("logged %d waits, want one per configuration:\n%s", n, logs.String())
	}

	waitWatches(t, 2)
	api := client.AdmissionregistrationV1()
	if _, err := api.MutatingWebhookConfigurations().Create(context.Background(), mutatingConfig(injector, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "created mutating configuration patched", func() bool {
		return allEqual(readState(t, client, injector, validator).mutatingCA, "root-3")
	})
	if _, err := api.ValidatingWebhookConfigurations().Create(context.Background(), validatingConfig(validator, "v"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "created validating configuration patched", func() bool {
		return allEqual(readState(t, client, injector, validator).validatingCA, "root-3")
	})
}

func TestConflictsAreRetried(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(mutatingConfig(injector, "a"))
	var conflicts atomic.Int32
	client.PrependReactor("update", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) <= 2 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "admissionregistration.k8s.io",
				Resource: "mutatingwebhookconfigurations"}, injector, nil)
		}
		return false, nil, nil
	})
	bundles := &fakeBundles{}
	bundles.set("root-1")
	start(t, Config{Client: client, Bundles: bundles, MutatingName: injector})
	eventually(t, wait, "patched after conflicts", func() bool {
		return allEqual(readState(t, client, injector, "").mutatingCA, "root-1")
	})
	if n := conflicts.Load(); n < 3 {
		t.Errorf("%d updates, want the two conflicts and a success", n)
	}
}

func TestOtherErrorsAreRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(validatingConfig(validator, "v"))
	var failures atomic.Int32
	client.PrependReactor("update", "validatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	bundles := &fakeBundles{}
	bundles.set("root-1")
	start(t, Config{Client: client, Bundles: bundles, ValidatingName: validator})
	eventually(t, wait, "patched after failures", func() bool {
		return allEqual(readState(t, client, "", validator).validatingCA, "root-1")
	})
}

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"without a client":         {Bundles: &fakeBundles{}, MutatingName: injector},
		"without bundles":          {Client: fake.NewClientset(), MutatingName: injector},
		"without any webhook name": {Client: fake.NewClientset(), Bundles: &fakeBundles{}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := New(cfg).Run(context.Background()); err == nil {
				t.Fatal("Run succeeded")
			}
		})
	}
}
