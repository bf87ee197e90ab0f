package artifacts

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/terrarun/terrarun/pkg/standalone"
)

// startEtcd starts an embedded single-member etcd without fsync, with its
// data in tb.TempDir(), and returns a client of it. Both are stopped when the
// test ends.
func startEtcd(tb testing.TB) *clientv3.Client {
	tb.Helper()
	e, err := standalone.StartEtcd(context.Background(), tb.TempDir(), standalone.WithoutFsync())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return newClient(tb, e.ClientURL())
}

func newClient(tb testing.TB, endpoint string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}
