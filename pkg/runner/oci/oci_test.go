package oci_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarun/terrarun/pkg/ociregistry"
	"github.com/terrarun/terrarun/pkg/runner/oci"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
	"github.com/terrarun/terrarun/pkg/runner/tarball"
)

const mainTF = `resource "terraform_data" "x" {}`

func fetch(t *testing.T, src oci.Source) (oci.Artifact, string, error) {
	t.Helper()
	dst := t.TempDir()
	a, err := oci.Fetch(context.Background(), src, dst, t.Logf)
	return a, dst, err
}

// unpacked lists the files below dir.
func unpacked(t *testing.T, dir string) []string {
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestFetch resolves a tag, a digest and a semver range against a real
// registry, over TLS with the registry's own CA, for Flux's layer type and
// a plain tar+gzip one.
func TestFetch(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	v1 := reg.Push("infra/app", "v1.0.0", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF, "modules/m/m.tf": "# m"})})
	reg.Push("infra/app", "v1.2.0", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF + "\n# 1.2"}), MediaType: types.OCILayer})
	v2 := reg.Push("infra/app", "v2.0.0", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF + "\n# 2"})})
	base := oci.Source{URL: reg.URL("infra/app"), CA: reg.CA}

	t.Run("tag", func(t *testing.T) {
		src := base
		src.Tag = "v1.0.0"
		a, dir, err := fetch(t, src)
		if err != nil {
			t.Fatal(err)
		}
		if a.Digest != v1 || a.Revision() != "v1.0.0@"+v1 {
			t.Errorf("artifact %+v, want the digest %s", a, v1)
		}
		if got := strings.Join(unpacked(t, dir), ","); got != "main.tf,modules/m/m.tf" {
			t.Errorf("unpacked %s", got)
		}
	})
	t.Run("digest", func(t *testing.T) {
		src := base
		src.Digest = v2
		a, dir, err := fetch(t, src)
		if err != nil {
			t.Fatal(err)
		}
		if a.Revision() != v2 {
			t.Errorf("revision %s, want %s", a.Revision(), v2)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "main.tf"))
		if !strings.Contains(string(b), "# 2") {
			t.Errorf("main.tf of the digest: %q", b)
		}
	})
	t.Run("semver", func(t *testing.T) {
		src := base
		src.Semver = "~1"
		a, _, err := fetch(t, src)
		if err != nil {
			t.Fatal(err)
		}
		if a.Tag != "v1.2.0" {
			t.Errorf("the newest tag in ~1 is %q, want v1.2.0", a.Tag)
		}
		src.Semver = ">=3"
		if _, _, err := fetch(t, src); err == nil || !strings.Contains(err.Error(), `no tag of`) {
			t.Errorf("a range no tag is in: %v", err)
		}
	})
	t.Run("untrusted CA", func(t *testing.T) {
		src := base
		src.CA = nil
		if _, _, err := fetch(t, src); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a registry whose CA is not trusted: %v", err)
		}
	})
	t.Run("wrong digest", func(t *testing.T) {
		src := base
		src.Digest = "sha256:" + strings.Repeat("0", 64)
		if _, _, err := fetch(t, src); err == nil {
			t.Error("an unknown digest was fetched")
		}
	})
}

// TestVerify checks cosign signatures before anything is unpacked: a
// signature by a listed key verifies; none, one by another key, and one
// over another digest are refused with a VerificationError naming the
// reference and the keys, and nothing is unpacked.
func TestVerify(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	trusted, also, other := ocitest.NewKey(t), ocitest.NewKey(t), ocitest.NewKey(t)
	signed := reg.Push("infra/signed", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF})})
	reg.Sign("infra/signed", signed, trusted.Signer)
	reg.Push("infra/unsigned", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF})})
	wrongKey := reg.Push("infra/wrongkey", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF})})
	reg.Sign("infra/wrongkey", wrongKey, other.Signer)
	// Two keys are trusted; other is not.
	keys := append(append([]byte{}, also.PublicPEM...), trusted.PublicPEM...)

	src := func(repo string) oci.Source {
		return oci.Source{URL: reg.URL(repo), Tag: "v1", CA: reg.CA, Verify: []oci.KeySet{{Keys: keys, Name: "Secret cosign-keys"}}}
	}
	a, dir, err := fetch(t, src("infra/signed"))
	if err != nil {
		t.Fatalf("a signed artifact: %v", err)
	}
	if len(a.Verified) != 1 || len(unpacked(t, dir)) != 1 {
		t.Errorf("verified by %q, unpacked %v", a.Verified, unpacked(t, dir))
	}
	for repo, want := range map[string]string{
		"infra/unsigned": "has no cosign signature",
		"infra/wrongkey": "none of its 1 signatures is by one of the 2 keys",
	} {
		_, dir, err := fetch(t, src(repo))
		var verr *oci.VerificationError
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Secret cosign-keys") ||
			!strings.Contains(err.Error(), reg.Host+"/"+repo+"@sha256:") {
			t.Errorf("%s: %v, want a VerificationError naming the reference and the keys: %s", repo, err, want)
		}
		if files := unpacked(t, dir); len(files) > 0 {
			t.Errorf("%s: unpacked %v before the signature verified", repo, files)
		}
	}
	// A trusted key's valid signature of another artifact (signed's
	// payload), copied under the signature tag of this one.
	forged := reg.Push("infra/forged", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF + "# forged"})})
	body := []byte(`{"critical":{"identity":{"docker-reference":"` + reg.Host + `/infra/signed"},"image":{"docker-manifest-digest":"` + signed + `"},"type":"cosign container image signature"},"optional":null}`)
	sig, err := trusted.Signer.SignMessage(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	reg.AddSignature("infra/forged", forged, body, sig)
	_, _, err = fetch(t, src("infra/forged"))
	if err == nil || !strings.Contains(err.Error(), "signed "+signed+", not "+forged) {
		t.Errorf("a trusted key's signature of another digest verified the artifact: %v", err)
	}
	// Every set must verify: the policy's keys and the Secret's.
	two := src("infra/signed")
	two.Verify = []oci.KeySet{{Keys: trusted.PublicPEM, Name: "the cluster policy's trustedSourceKeys"}, {Keys: other.PublicPEM, Name: "Secret cosign-keys"}}
	if _, _, err := fetch(t, two); err == nil || !strings.Contains(err.Error(), "with the keys of Secret cosign-keys") {
		t.Errorf("an artifact signed by a key of one set only: %v; want refused, naming the other set", err)
	}
	two.Verify[1].Keys = also.PublicPEM
	reg.Sign("infra/signed", signed, also.Signer)
	if a, _, err := fetch(t, two); err != nil || len(a.Verified) != 2 {
		t.Errorf("an artifact signed by a key of each set: %+v %v", a, err)
	}
	if keysErr := func() error {
		s := src("infra/signed")
		s.Verify[0].Keys = []byte("not a key")
		_, _, err := fetch(t, s)
		return err
	}(); keysErr == nil || !strings.Contains(keysErr.Error(), "holds no PEM public key") {
		t.Errorf("keys that are not PEM: %v", keysErr)
	}
}

// TestVerifyKeyless verifies keyless signatures against an offline trusted
// root: the identity, the issuer, the certificate's CA, the Rekor entry
// and the digest signed must all be right, or nothing is unpacked.
func TestVerifyKeyless(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	sigstore, other := ocitest.NewSigstore(t), ocitest.NewSigstore(t)
	const issuer, subject = "https://token.actions.example.com", "release@example.com"
	push := func(repo string) string {
		return reg.Push(repo, "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF + "# " + repo})})
	}
	signed := push("infra/signed")
	reg.SignKeyless("infra/signed", signed, sigstore, subject, issuer, true)
	wrongSubject := push("infra/wrongsubject")
	reg.SignKeyless("infra/wrongsubject", wrongSubject, sigstore, "intruder@example.com", issuer, true)
	wrongIssuer := push("infra/wrongissuer")
	reg.SignKeyless("infra/wrongissuer", wrongIssuer, sigstore, subject, "https://accounts.example.net", true)
	otherCA := push("infra/otherca")
	reg.SignKeyless("infra/otherca", otherCA, other, subject, issuer, true)
	unlogged := push("infra/unlogged")
	reg.SignKeyless("infra/unlogged", unlogged, sigstore, subject, issuer, false)
	keyed := push("infra/keyed")
	reg.Sign("infra/keyed", keyed, ocitest.NewKey(t).Signer)
	// The right identity's valid signature of signed, copied under the
	// signature tag of another artifact.
	forged := push("infra/forged")
	body := []byte(`{"critical":{"identity":{"docker-reference":"` + reg.Host + `/infra/signed"},"image":{"docker-manifest-digest":"` + signed + `"},"type":"cosign container image signature"},"optional":null}`)
	reg.AddKeylessSignature("infra/forged", forged, sigstore, subject, issuer, body, true)

	src := func(repo string) oci.Source {
		return oci.Source{URL: reg.URL(repo), Tag: "v1", CA: reg.CA, Verify: []oci.KeySet{{
			TrustedRoot: sigstore.TrustedRoot, Identities: []ociregistry.Identity{{Issuer: regexp.QuoteMeta(issuer), Subject: `(release|deploy)@example\.com`}},
			Name: "Secret sigstore-root"}}}
	}
	a, dir, err := fetch(t, src("infra/signed"))
	if err != nil {
		t.Fatalf("a keyless signature by the identity: %v", err)
	}
	if len(a.Verified) != 1 || a.Verified[0] != "identity "+subject+" of "+issuer || len(unpacked(t, dir)) != 1 {
		t.Errorf("verified by %q, unpacked %v", a.Verified, unpacked(t, dir))
	}
	for repo, want := range map[string]string{
		"infra/wrongsubject": "the signature of intruder@example.com does not verify",
		"infra/wrongissuer":  "the signature of " + subject + " does not verify",
		"infra/otherca":      "the signature of " + subject + " does not verify",
		"infra/unlogged":     "the signature of " + subject + " was not logged",
		"infra/keyed":        "carries no certificate (it was made with a key",
		"infra/forged":       "identity " + subject + " of " + issuer + " signed " + signed + ", not " + forged,
	} {
		_, dir, err := fetch(t, src(repo))
		var verr *oci.VerificationError
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "with the keyless identities of Secret sigstore-root") ||
			!strings.Contains(err.Error(), reg.Host+"/"+repo+"@sha256:") {
			t.Errorf("%s: %v, want a VerificationError naming the reference and the identities: %s", repo, err, want)
		}
		if files := unpacked(t, dir); len(files) > 0 {
			t.Errorf("%s: unpacked %v before the signature verified", repo, files)
		}
	}
	// An identity expression matches the whole subject, not a part of it.
	partial := src("infra/signed")
	partial.Verify[0].Identities[0].Subject = "release"
	if _, _, err := fetch(t, partial); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a subject expression that matches part of the subject: %v; want refused", err)
	}
	for what, set := range map[string]oci.KeySet{
		"no trusted root": {TrustedRoot: []byte(`{}`), Identities: src("").Verify[0].Identities, Name: "Secret sigstore-root"},
		"no identity":     {TrustedRoot: sigstore.TrustedRoot, Name: "Secret sigstore-root"},
	} {
		s := src("infra/signed")
		s.Verify = []oci.KeySet{set}
		if _, _, err := fetch(t, s); err == nil || !strings.Contains(err.Error(), "the trusted root") {
			t.Errorf("%s: %v; want refused, naming the trusted root", what, err)
		}
	}
}

// TestTamperedLayer changes the layer's bytes in the registry's storage:
// the layer is refused before a byte of it is unpacked, signed or not.
func TestTamperedLayer(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	key := ocitest.NewKey(t)
	d := reg.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF})})
	reg.Sign("infra/app", d, key.Signer)
	blob := reg.BlobPath(reg.LayerDigest("infra/app", d))
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	// The same size, one byte changed: only the digest tells.
	evil := append([]byte{}, orig...)
	evil[len(evil)/2] ^= 0xff
	if err := os.WriteFile(blob, evil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]byte{nil, key.PublicPEM} {
		var verify []oci.KeySet
		if keys != nil {
			verify = []oci.KeySet{{Keys: keys, Name: "Secret k"}}
		}
		_, dir, err := fetch(t, oci.Source{URL: reg.URL("infra/app"), Tag: "v1", CA: reg.CA, Verify: verify})
		if err == nil || !strings.Contains(err.Error(), "refusing to use it") {
			t.Errorf("a tampered layer (keys %v): %v", keys != nil, err)
		}
		if files := unpacked(t, dir); len(files) > 0 {
			t.Errorf("unpacked %v of a tampered layer", files)
		}
	}
}

// TestPrivate pulls from a registry that asks for a password: with the
// credentials of a docker config, without them (refused, saying what to
// set), and with credentials for another host only (never offered).
func TestPrivate(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	pushed := reg.Push("private/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": mainTF})})
	src := oci.Source{URL: reg.URL("private/app"), Tag: "v1", CA: reg.CA, DockerConfig: reg.DockerConfig()}
	a, _, err := fetch(t, src)
	if err != nil || a.Digest != pushed {
		t.Fatalf("with credentials: %+v %v", a, err)
	}
	src.DockerConfig = nil
	if _, _, err := fetch(t, src); err == nil || !strings.Contains(err.Error(), "credentialsSecret") {
		t.Errorf("without credentials: %v", err)
	}
	src.DockerConfig = []byte(`{"auths":{"other.example.com":{"username":"u","password":"p"}}}`)
	if _, _, err := fetch(t, src); err == nil || !strings.Contains(err.Error(), "no auths entry for "+reg.Host) {
		t.Errorf("credentials for another host: %v", err)
	}
	if got := ociregistry.Secrets(reg.DockerConfig()); !slices.Contains(got, reg.Password) {
		t.Errorf("Secrets does not list the password: %v", got)
	}
}

// TestLimits refuses layers over the size and file-count limits, names
// that leave the directory, and layers of another media type.
func TestLimits(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	many := map[string]string{}
	for i := range 20 {
		many[filepath.Join("d", string(rune('a'+i))+".tf")] = "#"
	}
	reg.Push("infra/many", "v1", ocitest.Artifact{Layer: ocitest.TarGz(many)})
	reg.Push("infra/big", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": strings.Repeat("#", 1<<20)})})
	reg.Push("infra/escape", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"../escape.tf": "#"})})
	reg.Push("infra/json", "v1", ocitest.Artifact{Layer: []byte(`{}`), MediaType: "application/json"})
	limits := tarball.Limits{Size: 512 << 10, Files: 10}
	for repo, want := range map[string]string{
		"infra/many":   "more than 10 entries",
		"infra/big":    "more than 524288 bytes",
		"infra/escape": `name contains ".."`,
		"infra/json":   "has no layer of a tar+gzip media type",
	} {
		_, _, err := fetch(t, oci.Source{URL: reg.URL(repo), Tag: "v1", CA: reg.CA, Limits: limits})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", repo, err, want)
		}
	}
}
