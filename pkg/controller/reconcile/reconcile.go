// Package reconcile is the worker loop the controllers share: it takes a
// key from a rate-limited workqueue, syncs it, and requeues it as the sync
// asks: with backoff after an error, after a delay, or not at all.
package reconcile

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Sync reconciles the object of key. A positive duration asks for key
// again after it.
type Sync func(ctx context.Context, key string) (time.Duration, error)

// Start runs workers goroutines that process queue with sync until ctx
// ends. What says what a sync does ("Reconciling run"), and kind is the
// log key of the object ("run").
func Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], workers int, sync Sync, what, kind string) {
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for next(ctx, queue, sync, what, kind) {
			}
		}, time.Second)
	}
}

// next processes one key; it returns false once queue shuts down. A
// conflict (someone wrote the object since the informer saw it) is
// retried like any error but logged at verbosity 2 only: it is how
// optimistic concurrency works, not a fault. Every other error is
// reported.
func next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], sync Sync, what, kind string) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	after, err := sync(ctx, key)
	switch {
	case apierrors.IsConflict(err):
		klog.FromContext(ctx).V(2).Info(what+": the object changed meanwhile; retrying", kind, key, "err", err)
		queue.AddRateLimited(key)
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, what, kind, key)
		queue.AddRateLimited(key)
	case after > 0:
		queue.Forget(key)
		queue.AddAfter(key, after)
	default:
		queue.Forget(key)
	}
	return true
}
