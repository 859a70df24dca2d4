package unsupported

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Scan lists once every object of the kinds cfg watches that the
// apiserver serves, and returns what a running Reporter would report of
// them: the list `istiod migrate check` shows before a move. It logs
// what a Reporter logs. It waits until every served kind is listed, or
// ctx is done (a kind the caller may not list never is).
func Scan(ctx context.Context, cfg Config) (Report, error) {
	r := New(cfg)
	started, err := r.discover(false)
	if err != nil {
		return Report{}, fmt.Errorf("scan Istio objects: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, w := range started {
		wg.Add(1)
		go func() { defer wg.Done(); w.informer.RunWithContext(ctx) }()
	}
	if !cache.WaitForCacheSync(ctx.Done(), r.HasSynced) {
		return Report{}, fmt.Errorf("scan Istio objects: not every kind listed: %w", context.Cause(ctx))
	}
	return r.Report(), nil
}
