package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/terrarun/terrarun/pkg/standalone"
)

// KubePKI is the PKI of a test kube-apiserver that aggregates extension
// API servers and issues service-account tokens: the cluster's CA and
// kube-apiserver's serving certificate, the front-proxy CA and the client
// certificate kube-apiserver proxies with, and the service-account key.
type KubePKI struct {
	// CA signs the serving certificate and the client certificates that
	// kube-apiserver accepts.
	CA                      *standalone.PKI
	ServingCert, ServingKey string
	FrontProxyCA            string
	ProxyCert, ProxyKey     string
	SAKey, SAPub            string
}

// NewKubePKI creates the PKI in dir (kube/, front-proxy/,
// front-proxy-client.crt and .key, sa.key and sa.pub), with a serving
// certificate for ip and the names of the kubernetes Service.
func NewKubePKI(dir string, ip net.IP) (*KubePKI, error) {
	k := &KubePKI{}
	var err error
	if k.CA, err = standalone.LoadOrCreatePKI(filepath.Join(dir, "kube")); err != nil {
		return nil, err
	}
	if k.ServingCert, k.ServingKey, err = k.CA.ServingCert([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"}, []net.IP{ip}); err != nil {
		return nil, err
	}
	front, err := standalone.LoadOrCreatePKI(filepath.Join(dir, "front-proxy"))
	if err != nil {
		return nil, err
	}
	k.FrontProxyCA = front.CAFile()
	if k.ProxyCert, k.ProxyKey, err = WriteClientCert(front, filepath.Join(dir, "front-proxy-client"), "front-proxy-client", nil); err != nil {
		return nil, err
	}
	if k.SAKey, k.SAPub, err = writeServiceAccountKey(dir); err != nil {
		return nil, err
	}
	return k, nil
}

// Args are kube-apiserver's flags for the PKI: its serving certificate, the
// client CA, the service-account issuer and keys, the front-proxy
// (requestheader) configuration and proxy client certificate, and routing
// to an APIService's endpoint addresses rather than its Service IP (there
// is no kube-proxy).
func (k *KubePKI) Args() []string {
	return []string{
		"--tls-cert-file", k.ServingCert, "--tls-private-key-file", k.ServingKey,
		"--client-ca-file", k.CA.CAFile(),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", k.SAPub,
		"--service-account-signing-key-file", k.SAKey,
		"--api-audiences", "https://kubernetes.default.svc",
		"--requestheader-client-ca-file", k.FrontProxyCA,
		"--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-uid-headers", "X-Remote-Uid",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", k.ProxyCert, "--proxy-client-key-file", k.ProxyKey,
		"--enable-aggregator-routing",
	}
}

// WriteClientCert writes a client certificate of p for user in groups to
// base.crt and its key to base.key, and returns both paths.
func WriteClientCert(p *standalone.PKI, base, user string, groups []string) (string, string, error) {
	certPEM, keyPEM, err := p.ClientCert(user, groups, 24*time.Hour)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(base+".crt", certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(base+".key", keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return base + ".crt", base + ".key", nil
}

// writeServiceAccountKey writes the key that signs service-account tokens,
// sa.key, and its public half, sa.pub, into dir.
func writeServiceAccountKey(dir string) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", err
	}
	return keyPath, pubPath, nil
}

// CAPool is a pool of the certificates in file; an unreadable file gives an
// empty pool, which verifies nothing.
func CAPool(file string) *x509.CertPool {
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(file)
	pool.AppendCertsFromPEM(data)
	return pool
}

// WaitHTTP polls url, trusting roots (nil: the system's) and with token as a
// bearer token when it is not empty, until it answers 200 or timeout passes.
func WaitHTTP(url string, roots *x509.CertPool, token string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %s", url, timeout, last)
}

// TimedGet GETs url through client with Accept accept and decodes the body
// into into with dec. It returns the time to the body read and to it
// decoded, and the body's size; an answer other than 200 in the accepted
// content type is an error.
func TimedGet(ctx context.Context, client *http.Client, url, accept string, dec runtime.Decoder, into runtime.Object) (read, decoded time.Duration, size int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Accept", accept)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, 0, err
	}
	read = time.Since(t0)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), accept) {
		return 0, 0, 0, fmt.Errorf("GET %s with Accept %s: %s, %s", url, accept, resp.Status, resp.Header.Get("Content-Type"))
	}
	if _, _, err := dec.Decode(body, nil, into); err != nil {
		return 0, 0, 0, fmt.Errorf("decoding the %s answer of %s: %w", accept, url, err)
	}
	return read, time.Since(t0), len(body), nil
}
