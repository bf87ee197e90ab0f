// Package ociregistry holds what terrarun needs to speak to an OCI registry
// without believing it: the credentials of a docker config, offered only to
// the host they name; a transport that trusts an extra CA; blob reads that
// are bounded by their descriptor and checked against its digest; and cosign
// signature verification of a manifest digest against public keys or, with
// an offline Sigstore trusted root, keyless identities (keyless.go).
//
// Two callers use it: the OCI source of a run's configuration (package
// runner/oci, in the executor) and the verification of executor images
// (admission plugin TerraformRunDefaults, in the server).
package ociregistry

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// SignatureAnnotation holds a cosign signature's base64 bytes on its layer,
// whose content is the signed payload.
const SignatureAnnotation = "dev.cosignproject.cosign/signature"

// ErrNoAuth says that a docker config has no entry for a registry.
var ErrNoAuth = errors.New("no auths entry")

// Secrets returns the values of a docker config to keep out of every log:
// passwords, tokens and the base64 forms registries are sent them in.
func Secrets(dockerConfig []byte) []string {
	var cfg dockerConfigFile
	if json.Unmarshal(dockerConfig, &cfg) != nil {
		return nil
	}
	var out []string
	for _, a := range cfg.Auths {
		for _, s := range []string{a.Password, a.Auth, a.IdentityToken, a.RegistryToken} {
			if s != "" {
				out = append(out, s)
			}
		}
		if a.Password != "" {
			out = append(out, base64.StdEncoding.EncodeToString([]byte(a.Username+":"+a.Password)))
		}
		if a.Auth != "" {
			if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
				if _, pw, ok := strings.Cut(string(b), ":"); ok && pw != "" {
					out = append(out, pw)
				}
			}
		}
	}
	return out
}

// dockerConfigFile is the part of a .dockerconfigjson that is used.
type dockerConfigFile struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// Auth returns the credentials of the docker config for registry (a host
// with an optional port), or anonymous ones when dockerConfig is nil. An
// entry matches when it names the host exactly, with or without a scheme
// and path, as docker's own lookup does; credentials are offered to no
// other host. A config with no entry for registry is an error that wraps
// ErrNoAuth and lists the hosts it has.
func Auth(dockerConfig []byte, registry string) (authn.Authenticator, error) {
	if dockerConfig == nil {
		return authn.Anonymous, nil
	}
	var cfg dockerConfigFile
	if err := json.Unmarshal(dockerConfig, &cfg); err != nil {
		return nil, errors.New("the .dockerconfigjson is not valid JSON; create it with kubectl create secret docker-registry")
	}
	for key, a := range cfg.Auths {
		host := key
		if i := strings.Index(host, "://"); i >= 0 {
			host = host[i+3:]
		}
		host, _, _ = strings.Cut(host, "/")
		if !strings.EqualFold(host, registry) {
			continue
		}
		return authn.FromConfig(authn.AuthConfig{
			Username: a.Username, Password: a.Password, Auth: a.Auth,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken,
		}), nil
	}
	hosts := make([]string, 0, len(cfg.Auths))
	for k := range cfg.Auths {
		hosts = append(hosts, k)
	}
	sort.Strings(hosts)
	return nil, fmt.Errorf("%w for %s (it has %s)", ErrNoAuth, registry, strings.Join(hosts, ", "))
}

// Transport is remote's default transport, trusting the system's CAs and
// the PEM certificates of ca.
func Transport(ca []byte) (http.RoundTripper, error) {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if len(ca) == 0 {
		return t, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("holds no PEM certificate")
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// ReadBlob reads a whole blob, no more than its descriptor's size, and
// returns it only when its sha256 is the descriptor's digest.
func ReadBlob(ref name.Digest, d v1.Descriptor, opts []remote.Option) ([]byte, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("blob digest %s: only sha256 is supported", d.Digest)
	}
	l, err := remote.Layer(ref, opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// go-containerregistry checks the digest too, at the end of the
	// stream; the check here comes first, so that a changed blob is
	// reported as such whatever else the read said.
	b, readErr := io.ReadAll(io.LimitReader(rc, d.Size+1))
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != d.Digest.Hex || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("the blob received (%d bytes, sha256:%s) is not the %s of %d bytes that the manifest names: refusing to use it", len(b), got, d.Digest, d.Size)
	}
	if readErr != nil {
		return nil, readErr
	}
	return b, nil
}

// IsStatus reports whether err is a registry's answer with HTTP status code.
func IsStatus(err error, code int) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == code
}

// maxSignatures bounds the signatures of a manifest that are tried, and
// maxPayload the size of one signed payload.
const (
	maxSignatures = 32
	maxPayload    = 64 << 10
)

// Key is a cosign public key.
type Key struct {
	// ID is the sha256 of its DER encoding, shortened as cosign's key IDs
	// are: sha256:<16 hex digits>.
	ID       string
	verifier signature.Verifier
}

// Keys are public keys, one of which must have signed a manifest.
type Keys []Key

// ParseKeys parses one or more PEM public keys (ECDSA, RSA or Ed25519).
func ParseKeys(b []byte) (Keys, error) {
	var keys Keys
	for {
		block, rest := pem.Decode(b)
		if block == nil {
			break
		}
		b = rest
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem.EncodeToMemory(block))
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
		}
		v, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
		}
		der, err := cryptoutils.MarshalPublicKeyToDER(pub)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(der)
		keys = append(keys, Key{ID: "sha256:" + hex.EncodeToString(sum[:8]), verifier: v})
	}
	if len(keys) == 0 {
		return nil, errors.New("holds no PEM public key; put the content of cosign.pub there")
	}
	return keys, nil
}

func (ks Keys) signer(sig, body []byte, _ map[string]string) (string, error) {
	for _, k := range ks {
		if k.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) == nil {
			return "key " + k.ID, nil
		}
	}
	return "", errNotBy
}

func (ks Keys) String() string { return fmt.Sprintf("one of the %d keys", len(ks)) }

// Signers are who may have signed a manifest: Keys, or a Keyless's
// identities.
type Signers interface {
	// signer returns who made sig over body, a layer of the signature
	// image with annotations, or errNotBy, or why the layer cannot say.
	signer(sig, body []byte, annotations map[string]string) (string, error)
	// String says who they are, for messages.
	String() string
}

// errNotBy says that a signature is by none of the signers.
var errNotBy = errors.New("not by one of the signers")

// SignatureError says that a manifest carries no signature by one of the
// signers: none at all, or none that verifies. Any other error of Verify
// is the registry's.
type SignatureError struct {
	Reason string
}

func (e *SignatureError) Error() string { return e.Reason }

// Verify checks that the cosign signature image of digest in repo (the tag
// sha256-<hex>.sig) holds a signature by one of by over a cosign payload
// that names digest. It returns who verified it ("key sha256:...", or a
// keyless identity). A manifest that none of them signed is a
// *SignatureError.
func Verify(repo name.Repository, digest string, by Signers, opts []remote.Option) (string, error) {
	sigTag := repo.Tag(strings.Replace(digest, ":", "-", 1) + ".sig")
	desc, err := remote.Get(sigTag, opts...)
	if err != nil {
		if IsStatus(err, http.StatusNotFound) {
			return "", &SignatureError{Reason: fmt.Sprintf("it has no cosign signature (no %s): sign it with cosign sign", sigTag.TagStr())}
		}
		return "", fmt.Errorf("fetching the signatures %s: %w", sigTag, err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return "", fmt.Errorf("parsing the signatures %s: %w", sigTag, err)
	}
	tried := 0
	var reasons []string
	for _, l := range m.Layers {
		sigB64, ok := l.Annotations[SignatureAnnotation]
		if !ok {
			continue
		}
		if tried++; tried > maxSignatures {
			break
		}
		sig, err := base64.StdEncoding.DecodeString(sigB64)
		if err != nil {
			reasons = append(reasons, "a signature is not base64")
			continue
		}
		if l.Size > maxPayload {
			reasons = append(reasons, fmt.Sprintf("a signed payload is %d bytes, over %d", l.Size, maxPayload))
			continue
		}
		body, err := ReadBlob(repo.Digest(l.Digest.String()), l, opts)
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		who, err := by.signer(sig, body, l.Annotations)
		if errors.Is(err, errNotBy) {
			continue
		}
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		var p payload.SimpleContainerImage
		if err := json.Unmarshal(body, &p); err != nil || p.Critical.Type != payload.CosignSignatureType {
			reasons = append(reasons, "a payload signed by "+who+" is not a cosign container image signature")
			continue
		}
		if p.Critical.Image.DockerManifestDigest != digest {
			reasons = append(reasons, fmt.Sprintf("%s signed %s, not %s", who, p.Critical.Image.DockerManifestDigest, digest))
			continue
		}
		return who, nil
	}
	if tried == 0 {
		return "", &SignatureError{Reason: sigTag.TagStr() + " holds no cosign signature"}
	}
	msg := fmt.Sprintf("none of its %d signatures is by %s", tried, by)
	if len(reasons) > 0 {
		msg += " (" + strings.Join(reasons, "; ") + ")"
	}
	return "", &SignatureError{Reason: msg}
}
