package leaderelection

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/terrarun/terrarun/pkg/standalone"
)

// TestOneLeaderAtATime runs two replicas: only one leads, and when it stops,
// the other takes over.
func TestOneLeaderAtATime(t *testing.T) {
	etcd, err := standalone.StartEtcd(t.Context(), t.TempDir(), standalone.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	leading := make(chan string, 2)
	stops := map[string]func(){}
	for _, id := range []string{"a", "b"} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			RunWhileLeader(ctx, client, "/test/leader", id, 5*time.Second, func(ctx context.Context) {
				leading <- id
				<-ctx.Done()
			})
		}()
		stops[id] = func() { cancel(); <-done }
		t.Cleanup(stops[id])
	}

	first := waitLeader(t, leading)
	select {
	case second := <-leading:
		t.Fatalf("%s and %s lead at the same time", first, second)
	case <-time.After(500 * time.Millisecond):
	}
	stops[first]()
	if next := waitLeader(t, leading); next == first {
		t.Fatalf("%s leads again after it stopped", next)
	}
}

func waitLeader(t *testing.T, leading <-chan string) string {
	t.Helper()
	select {
	case id := <-leading:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no leader within 30s")
		return ""
	}
}
