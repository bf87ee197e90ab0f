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
// and the signature must cover the manifest digest computed here (package
// ociregistry).
package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarun/terrarun/pkg/ociregistry"
	"github.com/terrarun/terrarun/pkg/runner/tarball"
)

// FluxContentMediaType is the layer of `flux push artifact`.
const FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

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
	// Verify lists who must each have signed the artifact: it must carry a
	// cosign signature by one signer of every set. None: the artifact is
	// not verified.
	Verify []KeySet
	// Limits bound the layer; zero members take tarball.DefaultLimits.
	Limits tarball.Limits
}

// KeySet is who may have signed the artifact: PEM public keys, or, with
// TrustedRoot, keyless identities.
type KeySet struct {
	Keys []byte
	// TrustedRoot is a Sigstore trusted_root.json: when it is set, the
	// signature must be a keyless one by one of Identities, checked
	// against it, and Keys is not used.
	TrustedRoot []byte
	Identities  []ociregistry.Identity
	// Name says where they come from, for messages ("Secret cosign-keys").
	Name string
}

// signers parses the set, or says what is wrong with it.
func (s KeySet) signers() (ociregistry.Signers, error) {
	if s.TrustedRoot != nil {
		k, err := ociregistry.ParseKeyless(s.TrustedRoot, s.Identities)
		if err != nil {
			return nil, fmt.Errorf("the trusted root %w", err)
		}
		return k, nil
	}
	keys, err := ociregistry.ParseKeys(s.Keys)
	if err != nil {
		return nil, fmt.Errorf("the keys %w", err)
	}
	return keys, nil
}

// what says what the set is, for messages.
func (s KeySet) what() string {
	if s.TrustedRoot != nil {
		return "the keyless identities of " + s.Name
	}
	return "the keys of " + s.Name
}

// Artifact is what was fetched.
type Artifact struct {
	// Digest is the manifest's digest, sha256:<hex>, computed from the
	// manifest received.
	Digest string
	// Tag is the tag that was resolved, "" for a digest.
	Tag string
	// Verified names the key or identity of each set of Source.Verify
	// that verified its signature, in their order.
	Verified []string
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
	Ref string
	// By is who may have signed it, such as "the keys of Secret cosign-keys".
	By     string
	Reason string
}

func (e *VerificationError) Error() string {
	return fmt.Sprintf("verifying the signature of %s with %s: %s", e.Ref, e.By, e.Reason)
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

// Fetch fetches src's artifact and unpacks its configuration into dst, a
// directory that must exist and be empty. logf reports progress (never a
// secret).
func Fetch(ctx context.Context, src Source, dst string, logf func(format string, args ...any)) (Artifact, error) {
	limits := src.Limits.OrDefault()
	repo, err := repository(src.URL, src.Insecure)
	if err != nil {
		return Artifact{}, err
	}
	auth, err := ociregistry.Auth(src.DockerConfig, repo.RegistryStr())
	if errors.Is(err, ociregistry.ErrNoAuth) {
		return Artifact{}, fmt.Errorf("the credentials Secret has %w: add one, or point spec.source.oci.url at a registry it has credentials for", err)
	}
	if err != nil {
		return Artifact{}, fmt.Errorf("the credentials Secret: %w", err)
	}
	rt, err := ociregistry.Transport(src.CA)
	if err != nil {
		return Artifact{}, fmt.Errorf(`the certSecret's "ca.crt" %w`, err)
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

	for _, set := range src.Verify {
		refStr := repo.String() + "@" + art.Digest
		by, err := set.signers()
		if err != nil {
			return Artifact{}, &VerificationError{Ref: refStr, By: set.what(), Reason: err.Error()}
		}
		who, err := ociregistry.Verify(repo, art.Digest, by, opts)
		if err != nil {
			return Artifact{}, &VerificationError{Ref: refStr, By: set.what(), Reason: registryError(err).Error()}
		}
		art.Verified = append(art.Verified, who)
		logf("terrarun: verified the cosign signature of %s: by %s, of %s", refStr, who, set.what())
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
	blob, err := ociregistry.ReadBlob(repo.Digest(layer.Digest.String()), *layer, opts)
	if err != nil {
		return Artifact{}, fmt.Errorf("downloading the layer of %s: %w", ref, registryError(err))
	}
	logf("terrarun: unpacking %s (%d bytes)", layer.Digest, len(blob))
	if err := tarball.Unpack(bytes.NewReader(blob), dst, limits); err != nil {
		return Artifact{}, fmt.Errorf("unpacking the layer of %s: %w", ref, err)
	}
	return art, nil
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
