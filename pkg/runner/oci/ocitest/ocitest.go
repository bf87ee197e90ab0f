// Package ocitest starts a real OCI registry for tests, as
// net/http/httptest starts an HTTP server: CNCF Distribution's registry,
// built by hack/registry.sh, whose path $TERRARUN_REGISTRY names, serving
// TLS with a CA of the test's own and, when asked, htpasswd authentication,
// from a directory that a test can read and tamper with. Artifacts are
// pushed with go-containerregistry and signed as cosign signs them, with
// sigstore's signature package.
package ocitest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"golang.org/x/crypto/bcrypt"

	"github.com/terrarun/terrarun/pkg/ociregistry"
	"github.com/terrarun/terrarun/pkg/runner/oci"
)

// Media types that cosign and flux write.
const (
	simpleSigningMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	fluxConfigMediaType    types.MediaType = "application/vnd.cncf.flux.config.v1+json"
)

// Options configure a registry.
type Options struct {
	// Private requires a user and password (Username, Password) for every
	// request.
	Private bool
	// Host is the address to listen on; 127.0.0.1 when empty.
	Host string
	// Insecure serves plain HTTP instead of TLS (and CA is nil).
	Insecure bool
}

// Registry is a registry process serving TLS on loopback.
type Registry struct {
	// Host is host:port, as in an oci:// URL.
	Host string
	// CA is the PEM certificate its TLS certificate is issued by.
	CA []byte
	// Username and Password are its one user's (Private only).
	Username, Password string
	// Root is its storage directory.
	Root string
	// Insecure says it serves plain HTTP.
	Insecure bool

	t      testing.TB
	output *bytes.Buffer
}

// Start starts a registry, stopped when the test ends.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	binary := os.Getenv("TERRARUN_REGISTRY")
	if binary == "" {
		t.Fatal("TERRARUN_REGISTRY is not set: run the tests through make, or set it to a registry binary (hack/registry.sh prints one)")
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	r := &Registry{Host: addr, Root: filepath.Join(dir, "storage"), Insecure: opts.Insecure, t: t, output: &bytes.Buffer{}}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
`, r.Root, addr)
	if !opts.Insecure {
		caPEM, certPEM, keyPEM := issue(t, host)
		r.CA = caPEM
		cfg += fmt.Sprintf("  tls: {certificate: %q, key: %q}\n", write("tls.crt", certPEM), write("tls.key", keyPEM))
	}
	if opts.Private {
		r.Username, r.Password = "terrarun-test", "registry-secret-"+randomHex(t)
		hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd: {realm: terrarun-test, path: %q}\n", write("htpasswd", []byte(r.Username+":"+string(hash)+"\n")))
	}
	cmd := exec.Command(binary, "serve", write("config.yml", []byte(cfg)))
	cmd.Stdout, cmd.Stderr = r.output, r.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("registry output (the last 20 lines; 404s are the pushes' probes):\n%s", lastLines(r.output.String(), 20))
		}
	})
	client := &http.Client{Transport: r.Transport(), Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(r.scheme() + "://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return r
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the registry exited (%v):\n%s", err, r.output)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry did not answer at %s: %v\n%s", addr, err, r.output)
		}
	}
}

func (r *Registry) scheme() string {
	if r.Insecure {
		return "http"
	}
	return "https"
}

// Transport trusts the registry's CA.
func (r *Registry) Transport() http.RoundTripper {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.CA)
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t
}

// URL is repo's oci:// URL.
func (r *Registry) URL(repo string) string { return "oci://" + r.Host + "/" + repo }

// DockerConfig is a .dockerconfigjson with the registry's credentials.
func (r *Registry) DockerConfig() []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{r.Host: map[string]string{
		"username": r.Username, "password": r.Password,
		"auth": base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + r.Password)),
	}}})
	return b
}

func (r *Registry) options() []remote.Option {
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	return []remote.Option{remote.WithTransport(r.Transport()), remote.WithAuth(auth), remote.WithContext(context.Background())}
}

// Artifact is an artifact to push: its layer's content and media type
// (oci.FluxContentMediaType when empty).
type Artifact struct {
	Layer     []byte
	MediaType types.MediaType
}

// Push pushes an artifact as `flux push artifact` does (a config of
// Flux's media type and one layer) under tag of repo, and returns its
// manifest digest.
func (r *Registry) Push(repo, tag string, a Artifact) string {
	r.t.Helper()
	d, err := Push(r.Host+"/"+repo+":"+tag, a, r.Insecure, r.options()...)
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// PushImage pushes a container image under tag of repo and returns its
// manifest digest.
func (r *Registry) PushImage(repo, tag string, img v1.Image) string {
	r.t.Helper()
	ref, err := name.NewTag(r.Host+"/"+repo+":"+tag, nameOptions(r.Insecure)...)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.options()...); err != nil {
		r.t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	return d.String()
}

// Sign signs digest of repo with signer as `cosign sign --key` does (see
// the function Sign).
func (r *Registry) Sign(repo, digest string, signer signature.Signer) {
	r.t.Helper()
	if err := Sign(r.Host+"/"+repo+"@"+digest, signer, r.Insecure, r.options()...); err != nil {
		r.t.Fatal(err)
	}
}

// AddSignature appends a signature layer (payload body, signature sig) to
// the signatures of digest, for forged and mismatched signatures.
func (r *Registry) AddSignature(repo, digest string, body, sig []byte) {
	r.t.Helper()
	if err := addSignature(r.Host+"/"+repo+"@"+digest, body, sig, nil, r.Insecure, r.options()...); err != nil {
		r.t.Fatal(err)
	}
}

// Push pushes an artifact to ref (host/repo:tag) as `flux push artifact`
// does, a config of Flux's media type and one layer, and returns its
// manifest digest; insecure pushes over plain HTTP.
func Push(ref string, a Artifact, insecure bool, opts ...remote.Option) (string, error) {
	mt := a.MediaType
	if mt == "" {
		mt = oci.FluxContentMediaType
	}
	tag, err := name.NewTag(ref, nameOptions(insecure)...)
	if err != nil {
		return "", err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, fluxConfigMediaType)
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(a.Layer, mt)})
	if err != nil {
		return "", err
	}
	img = mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.source":   "https://git.example.com/infra",
		"org.opencontainers.image.revision": tag.TagStr(),
	}).(v1.Image)
	if err := remote.Write(tag, img, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// Sign signs ref (host/repo@sha256:...) with signer as `cosign sign --key`
// (cosign 2's default format) does: a simple-signing payload naming the
// digest, its signature in an annotation of the payload's layer, in the
// image tagged sha256-<hex>.sig, appended to the signatures already there.
func Sign(ref string, signer signature.Signer, insecure bool, opts ...remote.Option) error {
	d, err := name.NewDigest(ref, nameOptions(insecure)...)
	if err != nil {
		return err
	}
	body, err := json.Marshal(payload.Cosign{Image: d})
	if err != nil {
		return err
	}
	sig, err := signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return addSignature(ref, body, sig, nil, insecure, opts...)
}

func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.StrictValidation, name.Insecure}
	}
	return []name.Option{name.StrictValidation}
}

// addSignature appends the layer of payload body, with signature sig and
// annotations besides it, to the signatures of ref.
func addSignature(ref string, body, sig []byte, annotations map[string]string, insecure bool, opts ...remote.Option) error {
	d, err := name.NewDigest(ref, nameOptions(insecure)...)
	if err != nil {
		return err
	}
	tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + ".sig")
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	if existing, err := remote.Image(tag, opts...); err == nil {
		base = existing
	}
	ann := map[string]string{ociregistry.SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)}
	maps.Copy(ann, annotations)
	img, err := mutate.Append(base, mutate.Addendum{Layer: static.NewLayer(body, simpleSigningMediaType), Annotations: ann})
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img, opts...); err != nil {
		return fmt.Errorf("pushing the signature %s: %w", tag, err)
	}
	return nil
}

// BlobPath is the file that holds blob digest (sha256:<hex>) in the
// registry's storage.
func (r *Registry) BlobPath(digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(r.Root, "docker", "registry", "v2", "blobs", "sha256", hex[:2], hex, "data")
}

// LayerDigest is the digest of the one layer of repo@digest.
func (r *Registry) LayerDigest(repo, digest string) string {
	r.t.Helper()
	ref, err := name.NewDigest(r.Host+"/"+repo+"@"+digest, nameOptions(r.Insecure)...)
	if err != nil {
		r.t.Fatal(err)
	}
	img, err := remote.Image(ref, r.options()...)
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		r.t.Fatal(err)
	}
	return m.Layers[0].Digest.String()
}

// Sigstore is a Fulcio CA and a Rekor log of the test's own, made by
// sigstore-go's VirtualSigstore, and the trusted_root.json that trusts
// them. No Fulcio or Rekor server runs (a real keyless signing needs an
// OIDC provider and a Trillian log): what the verifier checks of a keyless
// signature, offline, is the certificate chain, the Rekor entry's signed
// entry timestamp and body, and the identity, and those are real.
type Sigstore struct {
	vs          *ca.VirtualSigstore
	TrustedRoot []byte
}

// NewSigstore makes a Sigstore.
func NewSigstore(t testing.TB) *Sigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	// The Rekor log is keyed by its ID's bytes, as a trusted root lists
	// it (VirtualSigstore's own map keys it by its hex).
	logs := map[string]*root.TransparencyLog{}
	for id, l := range vs.RekorLogs() {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		c := *l
		c.ID = raw
		logs[id] = &c
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), vs.CTLogs(), vs.TimestampingAuthorities(), logs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return &Sigstore{vs: vs, TrustedRoot: b}
}

// SignKeyless signs digest of repo as keyless `cosign sign` (cosign 2's
// format) does: with a Fulcio certificate for subject (an email) of
// issuer, in the certificate annotation, and, when logged, the Rekor
// entry of the signature in the bundle annotation.
func (r *Registry) SignKeyless(repo, digest string, s *Sigstore, subject, issuer string, logged bool) {
	r.t.Helper()
	ref, err := name.NewDigest(r.Host+"/"+repo+"@"+digest, nameOptions(r.Insecure)...)
	if err != nil {
		r.t.Fatal(err)
	}
	body, err := json.Marshal(payload.Cosign{Image: ref})
	if err != nil {
		r.t.Fatal(err)
	}
	r.AddKeylessSignature(repo, digest, s, subject, issuer, body, logged)
}

// AddKeylessSignature appends a keyless signature of body, for forged and
// mismatched signatures (see SignKeyless).
func (r *Registry) AddKeylessSignature(repo, digest string, s *Sigstore, subject, issuer string, body []byte, logged bool) {
	r.t.Helper()
	cert, priv, err := s.vs.GenerateLeafCert(subject, issuer)
	if err != nil {
		r.t.Fatal(err)
	}
	signer, err := signature.LoadSigner(priv, crypto.SHA256)
	if err != nil {
		r.t.Fatal(err)
	}
	sig, err := signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	certPEM, err := cryptoutils.MarshalCertificateToPEM(cert)
	if err != nil {
		r.t.Fatal(err)
	}
	ann := map[string]string{ociregistry.CertificateAnnotation: string(certPEM)}
	if logged {
		sum := sha256.Sum256(body)
		entry, err := json.Marshal(map[string]any{
			"apiVersion": "0.0.1", "kind": "hashedrekord",
			"spec": map[string]any{
				"data":      map[string]any{"hash": map[string]string{"algorithm": "sha256", "value": hex.EncodeToString(sum[:])}},
				"signature": map[string]any{"content": sig, "publicKey": map[string]any{"content": certPEM}},
			},
		})
		if err != nil {
			r.t.Fatal(err)
		}
		logID, err := s.vs.RekorLogID()
		if err != nil {
			r.t.Fatal(err)
		}
		// Logged a minute after the certificate was made, within its ten
		// minutes.
		p := tlog.RekorPayload{Body: base64.StdEncoding.EncodeToString(entry), IntegratedTime: time.Now().Add(time.Minute).Unix(), LogIndex: 1000, LogID: logID}
		set, err := s.vs.RekorSignPayload(p)
		if err != nil {
			r.t.Fatal(err)
		}
		b, err := json.Marshal(map[string]any{"SignedEntryTimestamp": set, "Payload": map[string]any{
			"body": entry, "integratedTime": p.IntegratedTime, "logIndex": p.LogIndex, "logID": p.LogID}})
		if err != nil {
			r.t.Fatal(err)
		}
		ann[ociregistry.BundleAnnotation] = string(b)
	}
	if err := addSignature(r.Host+"/"+repo+"@"+digest, body, sig, ann, r.Insecure, r.options()...); err != nil {
		r.t.Fatal(err)
	}
}

// Key is a cosign key pair: its signer and its public key's PEM.
type Key struct {
	Signer    signature.Signer
	PublicPEM []byte
}

// NewKey makes an ECDSA P-256 key pair, cosign's default.
func NewKey(t testing.TB) Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadSignerVerifier(priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: sv, PublicPEM: pub}
}

// issue makes a CA and a certificate it issues for host.
func issue(t testing.TB, host string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "terrarun test registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func randomHex(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// TarGz is a tar+gzip archive of files (name → content), in name order.
func TarGz(files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write([]byte(files[n]))
	}
	_ = tw.Close()
	_ = gz.Close()
	return buf.Bytes()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// rawManifest is a manifest pushed as it is.
type rawManifest struct {
	body      []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

// PushModule pushes files as an OpenTofu module package (artifactType
// application/vnd.opentofu.modulepkg, one archive/zip layer) under tag of
// repo, as `tofu` installs from an oci:// module source, and returns its
// manifest digest.
func (r *Registry) PushModule(repo, tag string, files map[string]string) string {
	r.t.Helper()
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		w, err := zw.Create(n)
		if err != nil {
			r.t.Fatal(err)
		}
		_, _ = w.Write([]byte(files[n]))
	}
	if err := zw.Close(); err != nil {
		r.t.Fatal(err)
	}
	ref, err := name.NewTag(r.Host+"/"+repo+":"+tag, nameOptions(r.Insecure)...)
	if err != nil {
		r.t.Fatal(err)
	}
	config := static.NewLayer([]byte("{}"), "application/vnd.oci.empty.v1+json")
	layer := static.NewLayer(zipped.Bytes(), "archive/zip")
	var descs []v1.Descriptor
	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(ref.Context(), l, r.options()...); err != nil {
			r.t.Fatalf("pushing a blob of %s: %v", ref, err)
		}
		d, _ := l.Digest()
		size, _ := l.Size()
		mt, _ := l.MediaType()
		descs = append(descs, v1.Descriptor{MediaType: mt, Digest: d, Size: size})
	}
	body, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		ArtifactType: "application/vnd.opentofu.modulepkg", Config: descs[0], Layers: descs[1:]})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := remote.Put(ref, rawManifest{body: body, mediaType: types.OCIManifestSchema1}, r.options()...); err != nil {
		r.t.Fatalf("pushing %s: %v", ref, err)
	}
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}
