package terraformrundefaults

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

// warnings records the warnings admission adds to a request.
type warnings []string

func (w *warnings) AddWarning(_, text string) { *w = append(*w, text) }

// imagePolicy is a policy that verifies the images of reg with key.
func imagePolicy(t *testing.T, reg *ocitest.Registry, key ocitest.Key, extra string) *policy.Config {
	indent := func(b []byte) string {
		return "    " + strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n    ")
	}
	return loadPolicy(t, fmt.Sprintf(`apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
allowedImages: [%q, "registry.example.com/*", "ghcr.io/terrarun/*"]
imageVerification:
  images: [%q, "127.0.0.1:1/*"]
  publicKeys: |
%s
  caBundle: |
%s
%s`, reg.Host+"/*", reg.Host+"/*", indent(key.PublicPEM), indent(reg.CA), extra))
}

// clusterPlugin is the plugin for cfg as cluster mode initializes it.
func clusterPlugin(t *testing.T, cfg *policy.Config) *Plugin {
	t.Helper()
	p := New(cfg)
	p.SetExternalKubeInformerFactory(informers.NewSharedInformerFactory(fake.NewClientset(), 0))
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

// admitImage admits a run of image and returns it with the admission's
// error and warnings.
func admitImage(t *testing.T, p *Plugin, image string, mutate func(*terrarun.TerraformRun)) (*terrarun.TerraformRun, error, warnings) {
	t.Helper()
	run := newRun(func(r *terrarun.TerraformRun) {
		r.Spec.Engine.Image = image
		if mutate != nil {
			mutate(r)
		}
	})
	var w warnings
	ctx := warning.WithWarningRecorder(context.Background(), &w)
	err := p.Admit(ctx, attrs(run, nil, runsGVR, "", "CREATE"), nil)
	return run, err, w
}

// TestImageVerification verifies executor images against a real registry
// (CNCF Distribution over TLS with its own CA): a signed tag and digest are
// pinned to the digest verified; an unsigned image, one signed by another
// key, a tag moved to unsigned content and an image that does not exist
// are refused, naming spec.engine.image; a user's own imageDigest is
// refused; images outside the policy are never looked up; standalone
// verifies nothing.
func TestImageVerification(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	trusted, other := ocitest.NewKey(t), ocitest.NewKey(t)
	push := func(tag string) string {
		i, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		return reg.PushImage("terrarun/executor", tag, i)
	}
	signed := push("signed")
	reg.Sign("terrarun/executor", signed, trusted.Signer)
	unsigned := push("unsigned")
	wrongKey := push("wrongkey")
	reg.Sign("terrarun/executor", wrongKey, other.Signer)
	repo := reg.Host + "/terrarun/executor"
	p := clusterPlugin(t, imagePolicy(t, reg, trusted, ""))

	t.Run("signed tag", func(t *testing.T) {
		run, err, _ := admitImage(t, p, repo+":signed", nil)
		if err != nil {
			t.Fatal(err)
		}
		if run.Spec.Engine.ImageDigest != signed || run.Spec.Engine.Image != repo+":signed" {
			t.Errorf("engine %+v, want the image kept and pinned to %s", run.Spec.Engine, signed)
		}
	})
	t.Run("signed digest", func(t *testing.T) {
		run, err, _ := admitImage(t, p, repo+"@"+signed, nil)
		if err != nil || run.Spec.Engine.ImageDigest != signed {
			t.Fatalf("engine %+v, err %v; want pinned to %s", run.Spec.Engine, err, signed)
		}
	})
	refused := func(t *testing.T, image string, want ...string) {
		t.Helper()
		run, err, _ := admitImage(t, p, image, nil)
		if err == nil {
			t.Fatalf("%s admitted, pinned to %q", image, run.Spec.Engine.ImageDigest)
		}
		for _, w := range append(want, "spec.engine.image") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", image, err, w)
			}
		}
		if run.Spec.Engine.ImageDigest != "" {
			t.Errorf("a refused run was pinned to %s", run.Spec.Engine.ImageDigest)
		}
	}
	keyID := keyIDOf(t, trusted)
	t.Run("unsigned", func(t *testing.T) {
		refused(t, repo+":unsigned", unsigned, "has no cosign signature", keyID)
	})
	t.Run("signed by another key", func(t *testing.T) {
		refused(t, repo+":wrongkey", wrongKey, "none of its 1 signatures is by one of the 1 keys")
	})
	t.Run("missing", func(t *testing.T) {
		_, err, _ := admitImage(t, p, repo+":missing", nil)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "no such image") {
			t.Errorf("a missing tag: %v; want Invalid, no such image", err)
		}
	})
	t.Run("tag moved to unsigned content", func(t *testing.T) {
		moved := push("moving")
		reg.Sign("terrarun/executor", moved, trusted.Signer)
		run, err, _ := admitImage(t, p, repo+":moving", nil)
		if err != nil || run.Spec.Engine.ImageDigest != moved {
			t.Fatalf("before the move: %+v %v", run.Spec.Engine, err)
		}
		now := push("moving")
		refused(t, repo+":moving", now, "has no cosign signature")
	})
	t.Run("a user's imageDigest", func(t *testing.T) {
		_, err, _ := admitImage(t, p, repo+":unsigned", func(r *terrarun.TerraformRun) { r.Spec.Engine.ImageDigest = signed })
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.engine.imageDigest") {
			t.Errorf("a run that pins its own digest: %v; want Forbidden on spec.engine.imageDigest", err)
		}
	})
	t.Run("outside the policy", func(t *testing.T) {
		// registry.example.com is not covered; 127.0.0.1:1 is covered
		// but not allowed: neither is looked up (the lookup would fail).
		for _, image := range []string{"registry.example.com/executor:v1", "127.0.0.1:1/executor:v1"} {
			run, err, _ := admitImage(t, p, image, nil)
			if err != nil || run.Spec.Engine.ImageDigest != "" {
				t.Errorf("%s: engine %+v, err %v; want it left alone", image, run.Spec.Engine, err)
			}
		}
	})
	t.Run("standalone", func(t *testing.T) {
		sp := New(imagePolicy(t, reg, trusted, ""))
		sp.SetNamespaceLabeler(nil)
		if err := sp.ValidateInitialization(); err != nil {
			t.Fatal(err)
		}
		run, err, _ := admitImage(t, sp, repo+":unsigned", nil)
		if err != nil || run.Spec.Engine.ImageDigest != "" {
			t.Errorf("standalone: engine %+v, err %v; want no verification", run.Spec.Engine, err)
		}
	})
	t.Run("refuseUnsigned false", func(t *testing.T) {
		audit := clusterPlugin(t, imagePolicy(t, reg, trusted, "  refuseUnsigned: false\n"))
		run, err, w := admitImage(t, audit, repo+":unsigned", nil)
		if err != nil || run.Spec.Engine.ImageDigest != unsigned {
			t.Fatalf("engine %+v, err %v; want admitted, pinned to %s", run.Spec.Engine, err, unsigned)
		}
		if len(w) != 1 || !strings.Contains(w[0], "refuseUnsigned is false") {
			t.Errorf("warnings %q; want one that says why it was admitted", w)
		}
	})
	t.Run("registry down", func(t *testing.T) {
		cfg := imagePolicy(t, reg, trusted, "")
		cfg.AllowedImages = append(cfg.AllowedImages, "127.0.0.1:1/*")
		_, err, _ := admitImage(t, clusterPlugin(t, cfg), "127.0.0.1:1/executor:v1", nil)
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "retry") {
			t.Errorf("an unreachable registry: %v; want ServiceUnavailable, retry", err)
		}
	})
}

// TestImageVerificationPrivate reads the registry's credentials from the
// policy's credentialsFile: without it, the refusal says what to set.
func TestImageVerificationPrivate(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	key := ocitest.NewKey(t)
	i, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := reg.PushImage("private/executor", "v1", i)
	reg.Sign("private/executor", d, key.Signer)
	image := reg.Host + "/private/executor:v1"

	_, err, _ = admitImage(t, clusterPlugin(t, imagePolicy(t, reg, key, "")), image, nil)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "imageVerification.credentialsFile") {
		t.Errorf("without credentials: %v; want Forbidden, naming credentialsFile", err)
	}
	creds := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(creds, reg.DockerConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	run, err, _ := admitImage(t, clusterPlugin(t, imagePolicy(t, reg, key, "  credentialsFile: "+creds+"\n")), image, nil)
	if err != nil || run.Spec.Engine.ImageDigest != d {
		t.Errorf("with credentials: engine %+v, err %v; want pinned to %s", run.Spec.Engine, err, d)
	}
	if err != nil && strings.Contains(err.Error(), reg.Password) {
		t.Errorf("the error holds the registry's password")
	}
}

func keyIDOf(t *testing.T, k ocitest.Key) string {
	t.Helper()
	v, err := newImageVerifier(&policy.Config{ImageVerification: &policy.ImageVerification{PublicKeys: string(k.PublicPEM)}})
	if err != nil {
		t.Fatal(err)
	}
	return v.keyIDs
}

// TestImageVerificationEchoesNoAnswer: a run whose image names a host that
// answers with something else than a registry's error learns the status
// code only, never the body: the server is no proxy to read other hosts.
func TestImageVerificationEchoesNoAnswer(t *testing.T) {
	const secret = "internal-page-9f2c"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, secret, http.StatusInternalServerError)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	key := ocitest.NewKey(t)
	cfg := loadPolicy(t, fmt.Sprintf(`apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
imageVerification:
  publicKeys: %q
  caBundle: %q
`, key.PublicPEM, ca))
	_, err, _ := admitImage(t, clusterPlugin(t, cfg), host+"/executor:v1", nil)
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "500 Internal Server Error") {
		t.Errorf("a host that fails: %v; want ServiceUnavailable with its status", err)
	}
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("the refusal echoes the host's answer: %v", err)
	}
}
