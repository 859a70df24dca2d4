// Package webhookconfig keeps istiod's admission webhook configurations
// pointing at the current trust bundle.
//
// The Controller owns two fields of two cluster objects: clientConfig.caBundle
// of every webhook in the MutatingWebhookConfiguration (istio-sidecar-injector)
// and the ValidatingWebhookConfiguration (istio-validator-<ns>), and
// failurePolicy of the validating webhooks. caBundle always equals the trust
// bundle's PEM: it is patched when the bundle changes and put back when
// anyone else changes it. The validating webhooks start with failurePolicy
// Ignore, so that resources can be written while istiod cannot answer, and
// are switched to Fail once Ready reports that istiod serves /validate, as
// Istio does.
//
// A configuration that does not exist yet is waited for, not an error: it
// is patched as soon as it is created.
package webhookconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Bundles announces the trust bundle: the current one first, then every
// change.
type Bundles interface {
	Subscribe() (<-chan *ca.Bundle, func())
}

// FieldManager names istiod as the writer of the fields it patches.
const FieldManager = "istiod"

// Config configures the Controller.
type Config struct {
	Client  kubernetes.Interface
	Bundles Bundles
	// MutatingName is the MutatingWebhookConfiguration to keep, e.g.
	// istio-sidecar-injector or istio-sidecar-injector-<rev>. Empty skips it.
	MutatingName string
	// ValidatingName is the ValidatingWebhookConfiguration to keep, e.g.
	// istio-validator-istio-system or istio-validator-<rev>-<ns>. Empty
	// skips it.
	ValidatingName string
	// Ready reports that istiod can answer admission requests. Until it
	// first returns true the validating webhooks' failurePolicy is left
	// alone; nil means it is never changed.
	Ready func() bool
	// ReadyInterval is how often Ready is asked until it returns true.
	ReadyInterval time.Duration
	// RetryInterval is the first wait after a failed patch; it doubles up
	// to MaxRetryInterval.
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// ResyncPeriod re-checks both configurations even without events.
	ResyncPeriod time.Duration
	Logger       *slog.Logger
}

// Controller keeps the webhook configurations in step with the bundle.
type Controller struct {
	cfg Config
	// waiting records configurations reported missing, so that is logged
	// once. Only Run's goroutine touches it.
	waiting map[string]bool
}

// New returns a controller. It does no I/O.
func New(cfg Config) *Controller {
	if cfg.ReadyInterval <= 0 {
		cfg.ReadyInterval = time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.MaxRetryInterval < cfg.RetryInterval {
		cfg.MaxRetryInterval = max(30*time.Second, cfg.RetryInterval)
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Controller{cfg: cfg, waiting: map[string]bool{}}
}

// Run watches the two configurations and the bundle until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.Client == nil || c.cfg.Bundles == nil {
		return errors.New("webhookconfig: client and bundles are required")
	}
	if c.cfg.MutatingName == "" && c.cfg.ValidatingName == "" {
		return errors.New("webhookconfig: no webhook configuration to keep")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	bundles, cancel := c.cfg.Bundles.Subscribe()
	defer cancel()

	kick := make(chan struct{}, 1)
	c.startInformers(ctx, kick)

	var readyTick <-chan time.Time
	if c.cfg.Ready != nil {
		t := time.NewTicker(c.cfg.ReadyInterval)
		defer t.Stop()
		readyTick = t.C
	}
	retryTimer := time.NewTimer(time.Hour)
	retryTimer.Stop()
	defer retryTimer.Stop()
	wait := c.cfg.RetryInterval

	var bundle *ca.Bundle
	ready := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case b, ok := <-bundles:
			if !ok {
				return nil
			}
			bundle = b
		case <-kick:
		case <-readyTick:
			if !c.cfg.Ready() {
				continue
			}
		case <-retryTimer.C:
		}
		if !ready && c.cfg.Ready != nil && c.cfg.Ready() {
			ready = true
			readyTick = nil
			c.cfg.Logger.Info("istiod is ready: validating webhooks may fail closed")
		}
		if bundle == nil || len(bundle.PEM) == 0 {
			continue
		}
		if err := c.reconcile(ctx, bundle.PEM, ready); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.cfg.Logger.Error("webhook configurations not patched, retrying", "error", err, "retry_in", wait)
			retryTimer.Reset(wait)
			wait = min(2*wait, c.cfg.MaxRetryInterval)
			continue
		}
		wait = c.cfg.RetryInterval
	}
}

// reconcile patches both configurations; a missing one is skipped.
func (c *Controller) reconcile(ctx context.Context, pem []byte, ready bool) error {
	var errs []error
	if c.cfg.MutatingName != "" {
		errs = append(errs, c.syncMutating(ctx, pem))
	}
	if c.cfg.ValidatingName != "" {
		errs = append(errs, c.syncValidating(ctx, pem, ready))
	}
	return errors.Join(errs...)
}

func (c *Controller) syncMutating(ctx context.Context, pem []byte) error {
	api := c.cfg.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return syncConfig(ctx, c, "MutatingWebhookConfiguration", c.cfg.MutatingName, api.Get, api.Update,
		func(cur *admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, bool) {
			upd := cur.DeepCopy()
			changed := false
			for i := range upd.Webhooks {
				changed = setCABundle(&upd.Webhooks[i].ClientConfig, pem) || changed
			}
			return upd, changed
		})
}

func (c *Controller) syncValidating(ctx context.Context, pem []byte, ready bool) error {
	api := c.cfg.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return syncConfig(ctx, c, "ValidatingWebhookConfiguration", c.cfg.ValidatingName, api.Get, api.Update,
		func(cur *admissionregistrationv1.ValidatingWebhookConfiguration) (*admissionregistrationv1.ValidatingWebhookConfiguration, bool) {
			upd := cur.DeepCopy()
			changed := false
			for i := range upd.Webhooks {
				changed = setCABundle(&upd.Webhooks[i].ClientConfig, pem) || changed
				if ready {
					changed = setFailClosed(&upd.Webhooks[i].FailurePolicy) || changed
				}
			}
			return upd, changed
		})
}

// syncConfig reads one webhook configuration, applies mutate and writes it
// back when it changed, retrying on conflicts. A missing configuration is
// waited for, not an error.
func syncConfig[T any](ctx context.Context, c *Controller, kind, name string,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	mutate func(T) (T, bool)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := get(ctx, name, metav1.GetOptions{})
		if !c.present(kind, name, err) {
			return nil
		}
		if err != nil {
			return err
		}
		upd, changed := mutate(cur)
		if !changed {
			return nil
		}
		if _, err := update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return err
		}
		c.cfg.Logger.Info("patched webhook configuration", "kind", kind, "name", name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("patch %s %s: %w", kind, name, err)
	}
	return nil
}

// present reports whether the Get found the object, logging once while it
// is missing.
func (c *Controller) present(kind, name string, err error) bool {
	key := kind + "/" + name
	if apierrors.IsNotFound(err) {
		if !c.waiting[key] {
			c.waiting[key] = true
			c.cfg.Logger.Info("waiting for webhook configuration to be created", "kind", kind, "name", name)
		}
		return false
	}
	if err == nil && c.waiting[key] {
		delete(c.waiting, key)
		c.cfg.Logger.Info("webhook configuration created", "kind", kind, "name", name)
	}
	return true
}

func setCABundle(cc *admissionregistrationv1.WebhookClientConfig, pem []byte) bool {
	if bytes.Equal(cc.CABundle, pem) {
		return false
	}
	cc.CABundle = bytes.Clone(pem)
	return true
}

func setFailClosed(p **admissionregistrationv1.FailurePolicyType) bool {
	if *p != nil && **p == admissionregistrationv1.Fail {
		return false
	}
	fail := admissionregistrationv1.Fail
	*p = &fail
	return true
}
