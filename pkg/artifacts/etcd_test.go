package artifacts

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("listening on a free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// startEtcd starts an embedded single-member etcd on 127.0.0.1 with its data in
// tb.TempDir() and returns a client of it. Both are stopped when the test ends.
func startEtcd(tb testing.TB) *clientv3.Client {
	tb.Helper()
	var (
		e   *embed.Etcd
		err error
		cu  url.URL
	)
	for try := 0; try < 5; try++ {
		cfg := embed.NewConfig()
		cfg.Name = "artifacts-test"
		cfg.Dir = tb.TempDir()
		cfg.UnsafeNoFsync = true // a throw-away single member: durability is not tested here
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		ports := freePorts(tb, 2)
		cu = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
		pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		if e, err = embed.StartEtcd(cfg); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("starting etcd: %v", err)
	}
	tb.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		tb.Fatal("etcd took too long to start")
	}
	return newClient(tb, cu.String())
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
