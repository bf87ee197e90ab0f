package leaderelection

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/klog/v2"
)

// RunWhileLeader campaigns for leadership under key in etcd and runs lead
// while this process is the leader, so that of several replicas exactly one
// drives runs. When the etcd session is lost, lead's context is canceled and
// the campaign starts again; RunWhileLeader returns when ctx ends.
func RunWhileLeader(ctx context.Context, client *clientv3.Client, key, id string, ttl time.Duration, lead func(ctx context.Context)) {
	logger := klog.FromContext(ctx).WithValues("election", key, "identity", id)
	for ctx.Err() == nil {
		session, err := concurrency.NewSession(client, concurrency.WithTTL(int(ttl.Seconds())), concurrency.WithContext(ctx))
		if err != nil {
			logger.Error(err, "Creating an etcd session for leader election; retrying")
			sleep(ctx, time.Second)
			continue
		}
		election := concurrency.NewElection(session, key)
		if err := election.Campaign(ctx, id); err != nil {
			_ = session.Close()
			if ctx.Err() == nil {
				logger.Error(err, "Campaigning for leadership; retrying")
				sleep(ctx, time.Second)
			}
			continue
		}
		logger.Info("Became the leader; running the controller")
		leaderCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-session.Done():
				logger.Info("Lost the etcd session; stopping the controller")
			case <-leaderCtx.Done():
			}
			cancel()
		}()
		lead(leaderCtx)
		cancel()
		resignCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		_ = election.Resign(resignCtx)
		done()
		_ = session.Close()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
