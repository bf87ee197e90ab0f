// Package oci fetches a run's configuration from an OCI artifact: it
// resolves a tag, a semver range or a digest to a manifest digest, checks
// the artifact's cosign signature against public keys when asked to, and
// only then downloads its one tar+gzip layer, checks the layer's digest and
// unpacks it with limits on its size and file count.
//
// The registry is spoken to with go-containerregistry and signatures are
// checked with sigstore's signature package. Nothing that the registry
// says is believed without a check: the manifest's digest is computed from
// the bytes received, the layer is hashed before a byte of it is unpacked,
// and the signature must cover the manifest digest computed here.
package oci

import (
	"bytes"
	"context"
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

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/terrarun/terrarun/pkg/runner/tarball"
)

// Media types of the one layer that holds the configuration.
const (
	// FluxContentMediaType is the layer of `flux push artifact`.
	FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// SignatureAnnotation holds a cosign signature's base64 bytes on its
	// layer, whose content is the signed payload.
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
)

// layerTypes are the media types of a layer that holds the configuration.
var layerTypes = map[types.MediaType]bool{
	FluxContentMediaType:     true,
	types.OCILayer:           true, // application/vnd.oci.image.layer.v1.tar+gzip
	types.DockerLayer:        true,
	"application/tar+gzip":   true,
	"application/x-gzip":     true,
	"application/gzip":       true,
	"application/x-tar+gzip": true,
}

// Source is an artifact to fetch.
type Source struct {
	// URL is oci://host[:port]/path.
	URL string
	// Tag, Semver and Digest select the artifact; at most one is set, and
	// none means the tag "latest".
	Tag, Semver, Digest string
	// Insecure allows plain HTTP.
	Insecure bool
	// DockerConfig is the content of a .dockerconfigjson, or nil.
	DockerConfig []byte
	// CA is PEM CA certificates trusted besides the system's, or nil.
	CA []byte
	// Keys is PEM public keys; when set, the artifact must carry a cosign
	// signature by one of them. KeysName names where they come from, for
	// errors.
	Keys     []byte
	KeysName string
	// Limits bound the layer; zero members take tarball.DefaultLimits.
	Limits tarball.Limits
}

// Artifact is what was fetched.
type Artifact struct {
	// Digest is the manifest's digest, sha256:<hex>, computed from the
	// manifest received.
	Digest string
	// Tag is the tag that was resolved, "" for a digest.
	Tag string
	// Verified names the key that verified its signature, "" when none was
	// asked for.
	Verified string
}

// Revision is how the artifact is recorded in a run's status:
// tag@sha256:<hex>, or the digest alone.
func (a Artifact) Revision() string {
	if a.Tag == "" {
		return a.Digest
	}
	return a.Tag + "@" + a.Digest
}

// VerificationError says that the artifact's signature did not verify:
// nothing of it was unpacked.
type VerificationError struct {
	Ref    string
	Keys   string
	Reason string
}

func (e *VerificationError) Error() string {
	return fmt.Sprintf("verifying the signature of %s with the keys of %s: %s", e.Ref, e.Keys, e.Reason)
}

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

// authFor returns the credentials of the docker config for registry (a
// host with an optional port), or anonymous ones. An entry matches when it
// names the host exactly, with or without a scheme and path, as docker's
// own lookup does; credentials are offered to no other host.
func authFor(dockerConfig []byte, registry string) (authn.Authenticator, error) {
	if dockerConfig == nil {
		return authn.Anonymous, nil
	}
	var cfg dockerConfigFile
	if err := json.Unmarshal(dockerConfig, &cfg); err != nil {
		return nil, errors.New("the credentials Secret's .dockerconfigjson is not valid JSON; create it with kubectl create secret docker-registry")
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
	return nil, fmt.Errorf("the credentials Secret has no auths entry for %s (it has %s): add one, or point spec.source.oci.url at a registry it has credentials for",
		registry, strings.Join(hosts, ", "))
}

// repository parses an oci:// URL.
func repository(rawURL string, insecure bool) (name.Repository, error) {
	rest, ok := strings.CutPrefix(rawURL, "oci://")
	if !ok {
		return name.Repository{}, fmt.Errorf("OCI URL %q must start with oci://", rawURL)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(rest, append(opts, name.StrictValidation)...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("OCI URL %q: %w", rawURL, err)
	}
	return repo, nil
}

// roundTripper trusts the system's CAs and ca.
func roundTripper(ca []byte) (http.RoundTripper, error) {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if len(ca) == 0 {
		return t, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New(`the certSecret's "ca.crt" holds no PEM certificate`)
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// Fetch fetches src's artifact and unpacks its configuration into dst, a
// directory that must exist and be empty. logf reports progress (never a
// secret).
func Fetch(ctx context.Context, src Source, dst string, logf func(format string, args ...any)) (Artifact, error) {
	limits := src.Limits.OrDefault()
	repo, err := repository(src.URL, src.Insecure)
	if err != nil {
		return Artifact{}, err
	}
	auth, err := authFor(src.DockerConfig, repo.RegistryStr())
	if err != nil {
		return Artifact{}, err
	}
	rt, err := roundTripper(src.CA)
	if err != nil {
		return Artifact{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(rt)}

	art := Artifact{}
	var ref name.Reference
	switch {
	case src.Digest != "":
		ref = repo.Digest(src.Digest)
	case src.Semver != "":
		tag, err := newestInRange(repo, src.Semver, opts)
		if err != nil {
			return Artifact{}, err
		}
		art.Tag, ref = tag, repo.Tag(tag)
		logf("terrarun: %s: the newest tag in %q is %s", repo, src.Semver, tag)
	default:
		art.Tag = src.Tag
		if art.Tag == "" {
			art.Tag = "latest"
		}
		ref = repo.Tag(art.Tag)
	}
	logf("terrarun: pulling %s", ref)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetching the manifest of %s: %w", ref, registryError(err))
	}
	manifest := desc.Manifest
	sum := sha256.Sum256(manifest)
	art.Digest = "sha256:" + hex.EncodeToString(sum[:])
	if src.Digest != "" && art.Digest != src.Digest {
		return Artifact{}, fmt.Errorf("the manifest of %s has digest %s, not the %s asked for", ref, art.Digest, src.Digest)
	}
	if !desc.MediaType.IsImage() {
		return Artifact{}, fmt.Errorf("%s is a %s, not an artifact manifest: point spec.source.oci at one artifact, not an index", ref, desc.MediaType)
	}

	if src.Keys != nil {
		key, err := verify(repo, art.Digest, src.Keys, opts)
		refStr := repo.String() + "@" + art.Digest
		if err != nil {
			return Artifact{}, &VerificationError{Ref: refStr, Keys: src.KeysName, Reason: err.Error()}
		}
		art.Verified = key
		logf("terrarun: verified the cosign signature of %s with key %s of %s", refStr, key, src.KeysName)
	}

	m, err := v1.ParseManifest(bytes.NewReader(manifest))
	if err != nil {
		return Artifact{}, fmt.Errorf("parsing the manifest of %s: %w", ref, err)
	}
	var layer *v1.Descriptor
	for i := range m.Layers {
		if layerTypes[m.Layers[i].MediaType] {
			if layer != nil {
				return Artifact{}, fmt.Errorf("%s has more than one tar+gzip layer; push the configuration as one layer (flux push artifact, or oras push with one .tar.gz)", ref)
			}
			layer = &m.Layers[i]
		}
	}
	if layer == nil {
		return Artifact{}, fmt.Errorf("%s has no layer of a tar+gzip media type (such as %s): push the configuration with flux push artifact, or as one .tar.gz", ref, FluxContentMediaType)
	}
	if layer.Size > limits.Size {
		return Artifact{}, fmt.Errorf("the layer of %s is %d bytes, over the limit of %d", ref, layer.Size, limits.Size)
	}
	blob, err := download(repo.Digest(layer.Digest.String()), *layer, opts)
	if err != nil {
		return Artifact{}, fmt.Errorf("downloading the layer of %s: %w", ref, err)
	}
	logf("terrarun: unpacking %s (%d bytes)", layer.Digest, len(blob))
	if err := tarball.Unpack(bytes.NewReader(blob), dst, limits); err != nil {
		return Artifact{}, fmt.Errorf("unpacking the layer of %s: %w", ref, err)
	}
	return art, nil
}

// download reads a whole blob, no more than its descriptor's size, and
// returns it only when its sha256 is the descriptor's digest.
func download(ref name.Digest, d v1.Descriptor, opts []remote.Option) ([]byte, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("layer digest %s: only sha256 is supported", d.Digest)
	}
	l, err := remote.Layer(ref, opts...)
	if err != nil {
		return nil, registryError(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, registryError(err)
	}
	defer rc.Close()
	// go-containerregistry checks the digest too, at the end of the
	// stream; the check here comes first, so that a changed blob is
	// reported as such whatever else the read said.
	b, readErr := io.ReadAll(io.LimitReader(rc, d.Size+1))
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != d.Digest.Hex || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("the layer received (%d bytes, sha256:%s) is not the %s of %d bytes that the manifest names: refusing to unpack it", len(b), got, d.Digest, d.Size)
	}
	if readErr != nil {
		return nil, registryError(readErr)
	}
	return b, nil
}

// registryError shortens the errors of go-containerregistry to what says
// what to do.
func registryError(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%w (set spec.source.oci.credentialsSecret to a kubernetes.io/dockerconfigjson Secret with access to the repository)", err)
	}
	return err
}

// newestInRange returns the newest tag of repo in the semver range.
func newestInRange(repo name.Repository, rangeStr string, opts []remote.Option) (string, error) {
	c, err := semver.NewConstraint(rangeStr)
	if err != nil {
		return "", fmt.Errorf("semver range %q: %w", rangeStr, err)
	}
	tags, err := remote.List(repo, opts...)
	if err != nil {
		return "", fmt.Errorf("listing the tags of %s: %w", repo, registryError(err))
	}
	var best *semver.Version
	bestTag := ""
	for _, t := range tags {
		v, err := semver.NewVersion(t)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, bestTag = v, t
		}
	}
	if best == nil {
		return "", fmt.Errorf("no tag of %s is in the semver range %q (%d tags)", repo, rangeStr, len(tags))
	}
	return bestTag, nil
}

// maxSignatures bounds the signatures of an artifact that are tried, and
// maxPayload the size of one signed payload.
const (
	maxSignatures = 32
	maxPayload    = 64 << 10
)

// verify checks that the cosign signature image of digest in repo holds a
// signature by one of keys over a payload that names digest. It returns the
// fingerprint of the key that verified it.
func verify(repo name.Repository, digest string, keysPEM []byte, opts []remote.Option) (string, error) {
	keys, err := parseKeys(keysPEM)
	if err != nil {
		return "", err
	}
	sigTag := repo.Tag(strings.Replace(digest, ":", "-", 1) + ".sig")
	desc, err := remote.Get(sigTag, opts...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return "", fmt.Errorf("the artifact has no cosign signature (no %s): sign it with cosign sign --key", sigTag.TagStr())
		}
		return "", fmt.Errorf("fetching the signatures %s: %w", sigTag, registryError(err))
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
		body, err := download(repo.Digest(l.Digest.String()), l, opts)
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		for _, k := range keys {
			if k.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) != nil {
				continue
			}
			var p payload.SimpleContainerImage
			if err := json.Unmarshal(body, &p); err != nil || p.Critical.Type != payload.CosignSignatureType {
				reasons = append(reasons, "a payload signed by key "+k.id+" is not a cosign container image signature")
				continue
			}
			if p.Critical.Image.DockerManifestDigest != digest {
				reasons = append(reasons, fmt.Sprintf("key %s signed %s, not %s", k.id, p.Critical.Image.DockerManifestDigest, digest))
				continue
			}
			return k.id, nil
		}
	}
	if tried == 0 {
		return "", fmt.Errorf("%s holds no cosign signature", sigTag.TagStr())
	}
	msg := fmt.Sprintf("none of its %d signatures is by one of the %d keys", tried, len(keys))
	if len(reasons) > 0 {
		msg += " (" + strings.Join(reasons, "; ") + ")"
	}
	return "", errors.New(msg)
}

type publicKey struct {
	id       string
	verifier signature.Verifier
}

// parseKeys parses one or more PEM public keys; each is named by the
// sha256 of its DER encoding, as cosign's key IDs are.
func parseKeys(b []byte) ([]publicKey, error) {
	var keys []publicKey
	for {
		block, rest := pem.Decode(b)
		if block == nil {
			break
		}
		b = rest
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem.EncodeToMemory(block))
		if err != nil {
			return nil, fmt.Errorf("a key of cosign.pub: %w", err)
		}
		hash := crypto.SHA256
		v, err := signature.LoadVerifier(pub, hash)
		if err != nil {
			return nil, fmt.Errorf("a key of cosign.pub: %w", err)
		}
		der, err := cryptoutils.MarshalPublicKeyToDER(pub)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(der)
		keys = append(keys, publicKey{id: "sha256:" + hex.EncodeToString(sum[:8]), verifier: v})
	}
	if len(keys) == 0 {
		return nil, errors.New(`"cosign.pub" holds no PEM public key; put the content of cosign.pub there`)
	}
	return keys, nil
}
