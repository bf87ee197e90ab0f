package terraformrundefaults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/utils/lru"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/ociregistry"
)

// verifiedCacheSize bounds the digests remembered as verified: a digest's
// content never changes, nor do the policy's keys while the server runs.
const verifiedCacheSize = 1024

// imageVerifier checks the executor image of a new run against the cluster
// policy's imageVerification and pins the run to the digest it checked.
type imageVerifier struct {
	cfg       *policy.Config
	keys      ociregistry.Keys
	keyIDs    string
	transport http.RoundTripper
	// verified maps a repository@digest to the ID of the key that
	// verified it.
	verified *lru.Cache
}

// newImageVerifier returns the verifier of cfg's imageVerification, or nil
// when it has none. Load has validated the keys and the CA.
func newImageVerifier(cfg *policy.Config) (*imageVerifier, error) {
	v := cfg.ImageVerification
	if v == nil {
		return nil, nil
	}
	keys, err := ociregistry.ParseKeys([]byte(v.PublicKeys))
	if err != nil {
		return nil, fmt.Errorf("imageVerification.publicKeys: %w", err)
	}
	rt, err := ociregistry.Transport([]byte(v.CABundle))
	if err != nil {
		return nil, fmt.Errorf("imageVerification.caBundle %w", err)
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return &imageVerifier{
		cfg: cfg, keys: keys, keyIDs: strings.Join(ids, ", "), transport: rt,
		verified: lru.New(verifiedCacheSize),
	}, nil
}

// imagePath is the field that names a run's image.
var imagePath = field.NewPath("spec", "engine", "image")

// annotationVerifiedBy is the audit annotation that names the key that
// verified a run's executor image.
const annotationVerifiedBy = "imageverification.terrarun.dev/key"

// pin verifies the image of run, when the policy covers it, and sets
// spec.engine.imageDigest to the digest it verified. A run that sets
// spec.engine.imageDigest itself is refused: only this check sets it. An
// image that allowedImages refuses is left to TerraformRunPolicy to
// refuse, and not looked up, so that no run makes the server call a host
// the policy does not allow.
func (v *imageVerifier) pin(ctx context.Context, a admission.Attributes, run *terrarun.TerraformRun) error {
	e := &run.Spec.Engine
	if e.ImageDigest != "" {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns"), run.Name, field.Forbidden(field.NewPath("spec", "engine", "imageDigest"),
			"is set by the server when the cluster policy verifies the image; remove it (to run one digest, name it in spec.engine.image as image@sha256:...)"))
	}
	iv := v.cfg.ImageVerification
	if !iv.Covers(e.Image) || !v.cfg.ImageAllowed(e.Image) {
		return nil
	}
	ref, err := name.ParseReference(e.Image)
	if err != nil {
		return apierrors.NewInvalid(terrarun.Kind("TerraformRun"), run.Name, field.ErrorList{field.Invalid(imagePath, e.Image, "not an image reference: "+err.Error())})
	}
	timeout := policy.DefaultImageVerificationTimeout
	if iv.Timeout != nil {
		timeout = iv.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts, err := v.options(ctx, ref.Context().RegistryStr())
	if err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("verifying spec.engine.image %q: %v", e.Image, err))
	}

	digest, err := v.resolve(ref, opts)
	if err != nil {
		switch {
		case ociregistry.IsStatus(err, http.StatusNotFound):
			return apierrors.NewInvalid(terrarun.Kind("TerraformRun"), run.Name, field.ErrorList{field.Invalid(imagePath, e.Image,
				"the registry has no such image; push it, or name one that exists")})
		case ociregistry.IsStatus(err, http.StatusUnauthorized) || ociregistry.IsStatus(err, http.StatusForbidden):
			return apierrors.NewForbidden(terrarun.Resource("terraformruns"), run.Name, field.Forbidden(imagePath, fmt.Sprintf(
				"the registry refuses the server's request for %s (%v): give the cluster policy's imageVerification.credentialsFile read access to it", e.Image, registryAnswer(err))))
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf("verifying spec.engine.image %q: resolving its digest: %v; retry once the registry answers", e.Image, registryAnswer(err)))
	}
	pinned := ref.Context().String() + "@" + digest
	if key, ok := v.verified.Get(pinned); ok {
		_ = a.AddAnnotation(annotationVerifiedBy, key.(string))
	} else {
		key, err := ociregistry.Verify(ref.Context(), digest, v.keys, opts)
		var serr *ociregistry.SignatureError
		switch {
		case errors.As(err, &serr) && iv.RefusesUnsigned():
			return apierrors.NewForbidden(terrarun.Resource("terraformruns"), run.Name, field.Forbidden(imagePath, fmt.Sprintf(
				"the cluster policy's imageVerification refuses %s (%s): %s; sign it with one of the policy's keys (%s), or name an image that is",
				e.Image, digest, serr.Reason, v.keyIDs)))
		case errors.As(err, &serr):
			warning.AddWarning(ctx, "", fmt.Sprintf("spec.engine.image %s (%s) is not signed by one of the policy's keys (%s): %s; it is admitted because imageVerification.refuseUnsigned is false",
				e.Image, digest, v.keyIDs, serr.Reason))
		case err != nil:
			return apierrors.NewServiceUnavailable(fmt.Sprintf("verifying spec.engine.image %q (%s): %v; retry once the registry answers", e.Image, digest, registryAnswer(err)))
		default:
			v.verified.Add(pinned, key)
			_ = a.AddAnnotation(annotationVerifiedBy, key)
		}
	}
	e.ImageDigest = digest
	return nil
}

// options are the registry options for a host: the policy's transport and
// the credentials file's entry for the host, if any.
func (v *imageVerifier) options(ctx context.Context, registry string) ([]remote.Option, error) {
	auth := authn.Anonymous
	if f := v.cfg.ImageVerification.CredentialsFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading imageVerification.credentialsFile: %w", err)
		}
		a, err := ociregistry.Auth(b, registry)
		switch {
		case errors.Is(err, ociregistry.ErrNoAuth):
			// Anonymous: the file need not cover every registry.
		case err != nil:
			return nil, fmt.Errorf("imageVerification.credentialsFile %s: %w", f, err)
		default:
			auth = a
		}
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(v.transport)}, nil
}

// resolve returns the digest of ref: its own, or the one its tag has now.
// Believing the registry's answer is safe: the digest must then carry a
// signature, and the kubelet checks what it pulls against it.
func (v *imageVerifier) resolve(ref name.Reference, opts []remote.Option) (string, error) {
	if d, ok := ref.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return "", err
	}
	if desc.Digest.Algorithm != "sha256" {
		return "", fmt.Errorf("the registry gives digest %s; only sha256 is supported", desc.Digest)
	}
	return desc.Digest.String(), nil
}

// registryAnswer is what a refusal says of a registry's error: its HTTP
// status, not the body it sent, so that a run cannot use the server to
// read what some other host answers.
func registryAnswer(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return fmt.Errorf("the registry answered %d %s", terr.StatusCode, http.StatusText(terr.StatusCode))
	}
	return err
}
