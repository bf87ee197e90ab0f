package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// DefaultMaxFollowsPerUser is Deps.MaxFollowsPerUser when it is 0.
const DefaultMaxFollowsPerUser = 32

// errShuttingDown ends the waits of a server that is shutting down.
var errShuttingDown = errors.New("the server is shutting down")

// waiters tracks the requests that wait on runs (log follows, plan waits):
// it caps how many one user holds open on this server, and ends them all
// when the server shuts down, so that they do not hold its shutdown up.
type waiters struct {
	max int

	mu       sync.Mutex
	byUser   map[string]int
	stopping chan struct{}
	stopped  bool
}

func newWaiters(max int) *waiters {
	if max <= 0 {
		max = DefaultMaxFollowsPerUser
	}
	return &waiters{max: max, byUser: map[string]int{}, stopping: make(chan struct{})}
}

// start counts a wait of the request's user, or refuses it with 429 when the
// user already holds max. The returned context ends when the server shuts
// down (its cause errShuttingDown); call done when the wait ends.
func (w *waiters) start(ctx context.Context) (context.Context, func(), error) {
	user := ""
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		user = u.GetName()
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, nil, apierrors.NewServiceUnavailable("the server is shutting down; try again")
	}
	if w.byUser[user] >= w.max {
		w.mu.Unlock()
		return nil, nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"user %q already follows %d logs or plans on this server, its limit; end some (or read without follow=true / wait=true)", user, w.max), 1)
	}
	w.byUser[user]++
	w.mu.Unlock()

	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-w.stopping:
			cancel(errShuttingDown)
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			cancel(nil)
			w.mu.Lock()
			if w.byUser[user]--; w.byUser[user] <= 0 {
				delete(w.byUser, user)
			}
			w.mu.Unlock()
		})
	}, nil
}

// stop ends every wait and refuses new ones.
func (w *waiters) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.stopping)
	}
}
