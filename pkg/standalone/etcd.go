package standalone

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an embedded single-member etcd server.
type Etcd struct {
	e         *embed.Etcd
	clientURL string
	tls       *EtcdClientTLS
	// stop ends maintain, which closes maintained when it returns.
	stop       context.CancelFunc
	maintained chan struct{}
}

// EtcdClientTLS are the files a client presents to an etcd started
// WithClientCertAuth, and verifies it with.
type EtcdClientTLS struct {
	CertFile, KeyFile, CAFile string
}

// etcdConfig is what the options change.
type etcdConfig struct {
	noFsync bool
	pkiDir  string
	quota   int64
}

// EtcdOption changes how StartEtcd configures etcd.
type EtcdOption func(*etcdConfig)

// WithoutFsync makes etcd skip fsync: for tests' throw-away members only,
// which lose what they hold when the machine crashes.
func WithoutFsync() EtcdOption {
	return func(c *etcdConfig) { c.noFsync = true }
}

// WithQuota sets etcd's space quota (--quota-backend-bytes) to bytes; 0
// keeps etcd's default, 2 GiB.
func WithQuota(bytes int64) EtcdOption {
	return func(c *etcdConfig) { c.quota = bytes }
}

// WithClientCertAuth makes etcd serve TLS and accept only clients, and
// peers, with a certificate of its own CA, kept in pkiDir: a CA of etcd's
// alone, so that no user certificate of the server's CA opens etcd. Anything
// else on the host that reaches its loopback port, such as a sandboxed stage,
// gets nothing from it.
func WithClientCertAuth(pkiDir string) EtcdOption {
	return func(c *etcdConfig) { c.pkiDir = pkiDir }
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
	var o etcdConfig
	for _, opt := range opts {
		opt(&o)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("finding free ports for embedded etcd: %w", err)
	}
	scheme := "http"
	var clientTLS *EtcdClientTLS
	var serverTLS transport.TLSInfo
	if o.pkiDir != "" {
		scheme = "https"
		if serverTLS, clientTLS, err = etcdCerts(o.pkiDir); err != nil {
			return nil, err
		}
	}
	clientURL := url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

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
	cfg.UnsafeNoFsync = o.noFsync
	cfg.QuotaBackendBytes = o.quota
	if clientTLS != nil {
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = serverTLS, serverTLS
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
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	etcd := &Etcd{e: e, clientURL: clientURL.String(), tls: clientTLS, stop: stop, maintained: make(chan struct{})}
	go func() {
		defer close(etcd.maintained)
		etcd.maintain(mctx)
	}()
	return etcd, nil
}

// ClientURL is the address for --etcd-servers.
func (e *Etcd) ClientURL() string { return e.clientURL }

// ClientTLS is what a client presents to etcd and verifies it with; nil
// without WithClientCertAuth.
func (e *Etcd) ClientTLS() *EtcdClientTLS { return e.tls }

// etcdCerts loads or creates etcd's own CA in dir, and issues a certificate
// for etcd (server and peer, 127.0.0.1) and one for its client, renewed on
// every start.
func etcdCerts(dir string) (transport.TLSInfo, *EtcdClientTLS, error) {
	ca, err := LoadOrCreatePKI(dir)
	if err != nil {
		return transport.TLSInfo{}, nil, fmt.Errorf("etcd's CA: %w", err)
	}
	issue := func(name string, usages []x509.ExtKeyUsage, ips []net.IP) (string, string, error) {
		certPEM, keyPEM, err := ca.sign(&x509.Certificate{
			Subject:     pkix.Name{CommonName: name},
			IPAddresses: ips,
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: usages,
		}, 365*24*time.Hour)
		if err != nil {
			return "", "", err
		}
		certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
			return "", "", err
		}
		return certFile, keyFile, writeFileAtomic(certFile, certPEM, 0o644)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	serverCert, serverKey, err := issue("etcd", both, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return transport.TLSInfo{}, nil, fmt.Errorf("etcd's certificate: %w", err)
	}
	clientCert, clientKey, err := issue("etcd-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	if err != nil {
		return transport.TLSInfo{}, nil, fmt.Errorf("etcd's client certificate: %w", err)
	}
	server := transport.TLSInfo{CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: ca.CAFile(), ClientCertAuth: true}
	return server, &EtcdClientTLS{CertFile: clientCert, KeyFile: clientKey, CAFile: ca.CAFile()}, nil
}

// Close stops etcd gracefully; everything acknowledged is already on disk.
func (e *Etcd) Close() {
	e.stop()
	<-e.maintained
	e.e.Close()
}

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
