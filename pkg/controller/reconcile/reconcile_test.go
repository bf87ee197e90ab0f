package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestNext: a conflict is retried without an error in the log; any other
// error is retried and reported; a delay is asked for; success forgets.
func TestNext(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "terrarun.dev", Resource: "terraformruns"}, "r1", errors.New("the object has been modified"))
	for _, tc := range []struct {
		name      string
		after     time.Duration
		err       error
		requeues  int
		wantError bool
	}{
		{name: "conflict", err: conflict, requeues: 1},
		{name: "failure", err: errors.New("etcd is down"), requeues: 1, wantError: true},
		{name: "later", after: time.Hour},
		{name: "done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(2)))
			ctx := klog.NewContext(t.Context(), logger)
			queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			defer queue.ShutDown()
			queue.Add("ns/r1")
			synced := 0
			sync := func(_ context.Context, key string) (time.Duration, error) {
				synced++
				return tc.after, tc.err
			}
			if !next(ctx, queue, sync, "Reconciling run", "run") || synced != 1 {
				t.Fatalf("synced %d times", synced)
			}
			if got := queue.NumRequeues("ns/r1"); got != tc.requeues {
				t.Errorf("requeues %d, want %d", got, tc.requeues)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if got := strings.Contains(logs, "ERROR"); got != tc.wantError {
				t.Errorf("error logged: %v, want %v:\n%s", got, tc.wantError, logs)
			}
			if tc.err != nil && !strings.Contains(logs, "ns/r1") {
				t.Errorf("the log does not name the key:\n%s", logs)
			}
		})
	}
}
