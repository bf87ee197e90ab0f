package standalone

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, caKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v; want 0600", err, fi.Mode())
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.cert)

	certFile, _, err := p.ServingCert([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	serving := parseCert(t, data)
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}

	certPEM, _, err := p.ClientCert("bob", []string{"approvers"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client := parseCert(t, certPEM)
	if client.Subject.CommonName != "bob" || len(client.Subject.Organization) != 1 || client.Subject.Organization[0] != "approvers" {
		t.Errorf("client subject = %v, want CN=bob O=approvers", client.Subject)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, _, err := p.ClientCert("", nil, time.Hour); err == nil {
		t.Error("a client certificate without a user was issued")
	}

	// A second start keeps the CA, so earlier kubeconfigs stay valid.
	again, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.cert.Equal(p.cert) {
		t.Error("reloading the PKI created a new CA")
	}
}

func TestMintKubeconfig(t *testing.T) {
	dataDir := t.TempDir()
	out := filepath.Join(t.TempDir(), "bob.kubeconfig")
	err := MintKubeconfig(dataDir, out, "bob", nil)
	if err == nil || !strings.Contains(err.Error(), "start the server once") {
		t.Fatalf("minting before the server ever started: %v, want an error that says to start it", err)
	}

	p, err := LoadOrCreatePKI(filepath.Join(dataDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteKubeconfig(filepath.Join(dataDir, AdminKubeconfigFile), "https://127.0.0.1:8443", AdminUser, AdminGroups); err != nil {
		t.Fatal(err)
	}
	if err := MintKubeconfig(dataDir, out, "bob", []string{"approvers"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.Clusters[ctx.Cluster].Server != "https://127.0.0.1:8443" {
		t.Errorf("server = %q", cfg.Clusters[ctx.Cluster].Server)
	}
	cert := parseCert(t, cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
	if cert.Subject.CommonName != "bob" {
		t.Errorf("user = %q, want bob", cert.Subject.CommonName)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode: %v %v, want 0600 (it holds a private key)", err, fi.Mode())
	}
}
