// Package kubewatch is what istiod's informers share.
package kubewatch

import (
	"context"
	"errors"
	"io"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// ErrorLogger logs an informer's list and watch failures through log
// instead of klog, naming the resource. A closed or expired watch is
// routine: logged at debug level only.
func ErrorLogger(log *slog.Logger, resource string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			log.Debug("Kubernetes watch restarted", "resource", resource, "err", err)
			return
		}
		log.Warn("Kubernetes list or watch failed; retrying", "resource", resource, "err", err)
	}
}
