package webhookconfig

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// startInformers watches the two named configurations, each with a
// field-selector informer on metadata.name, and signals kick on every
// event. They stop with ctx.
func (c *Controller) startInformers(ctx context.Context, kick chan<- struct{}) {
	api := c.cfg.Client.AdmissionregistrationV1()
	if name := c.cfg.MutatingName; name != "" {
		mwc := api.MutatingWebhookConfigurations()
		c.runInformer(ctx, name, &admissionregistrationv1.MutatingWebhookConfiguration{}, kick, c.cfg.Client,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return mwc.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return mwc.Watch(ctx, o) })
	}
	if name := c.cfg.ValidatingName; name != "" {
		vwc := api.ValidatingWebhookConfigurations()
		c.runInformer(ctx, name, &admissionregistrationv1.ValidatingWebhookConfiguration{}, kick, c.cfg.Client,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return vwc.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return vwc.Watch(ctx, o) })
	}
}

func (c *Controller) runInformer(ctx context.Context, name string, example runtime.Object, kick chan<- struct{}, client any,
	list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext,
) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFn(ctx, o)
		},
	}
	// The clientset says whether it supports watch-list streaming (the
	// fake clientset does not); the wrapper passes that on to the reflector.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), example, c.cfg.ResyncPeriod, cache.Indexers{})
	notify := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		// A client that ignores field selectors (a fake) sends every object.
		if m, ok := obj.(metav1.Object); ok && m.GetName() != name {
			return
		}
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	})
	go inf.RunWithContext(ctx)
}
