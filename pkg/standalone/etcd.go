package standalone

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an embedded single-member etcd server.
type Etcd struct {
	e         *embed.Etcd
	clientURL string
}

// EtcdOption changes how StartEtcd configures etcd.
type EtcdOption func(*embed.Config)

// WithoutFsync makes etcd skip fsync: for tests' throw-away members only,
// which lose what they hold when the machine crashes.
func WithoutFsync() EtcdOption {
	return func(c *embed.Config) { c.UnsafeNoFsync = true }
}

// StartEtcd starts etcd with its data in dir, listening on free loopback ports,
// and waits until it serves. Data written before a restart is kept. If the
// ports are taken before etcd listens on them, it tries others.
func StartEtcd(ctx context.Context, dir string, opts ...EtcdOption) (*Etcd, error) {
	var err error
	for try := 0; try < 5; try++ {
		var e *Etcd
		if e, err = startEtcd(ctx, dir, opts); !errors.Is(err, syscall.EADDRINUSE) {
			return e, err
		}
	}
	return nil, err
}

func startEtcd(ctx context.Context, dir string, opts []EtcdOption) (*Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("finding free ports for embedded etcd: %w", err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "terrarun"
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// A restarted member keeps its data; its peer URL may change with the port.
	cfg.StrictReconfigCheck = false
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Keep the on-disk history bounded.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	for _, o := range opts {
		o(cfg)
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within 60s", dir)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Etcd{e: e, clientURL: clientURL.String()}, nil
}

// ClientURL is the address for --etcd-servers.
func (e *Etcd) ClientURL() string { return e.clientURL }

// Close stops etcd gracefully; everything acknowledged is already on disk.
func (e *Etcd) Close() { e.e.Close() }

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
