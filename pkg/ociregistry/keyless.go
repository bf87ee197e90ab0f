package ociregistry

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// Annotations of a keyless cosign signature's layer (cosign 2's format):
// the Fulcio certificate that signed it, PEM, and the Rekor entry that
// logged it, as a signed entry timestamp and the entry's body.
const (
	CertificateAnnotation = "dev.sigstore.cosign/certificate"
	BundleAnnotation      = "dev.sigstore.cosign/bundle"
)

// Identity is a keyless signer: the OIDC issuer and the subject (the email
// or URI of its certificate's subject alternative name) of a short-lived
// Fulcio certificate. Each is a regular expression that must match the
// whole value.
type Identity struct {
	Issuer  string
	Subject string
}

// String says who the identity is, for messages.
func (id Identity) String() string { return fmt.Sprintf("%s of %s", id.Subject, id.Issuer) }

// Keyless checks keyless signatures against an offline Sigstore trusted
// root: the certificate chains to one of its Fulcio CAs, the signature was
// logged by one of its Rekor logs (whose signed entry timestamp is checked,
// and whose time is the time the certificate must have been valid at), and
// the certificate is one of the identities'. No log or CA is asked
// anything: what the root holds is all that is believed. Certificate
// transparency (the certificate's SCTs) is not checked.
type Keyless struct {
	verifier   *verify.Verifier
	policy     []verify.PolicyOption
	identities []Identity
}

// ParseKeyless parses a trusted_root.json (Sigstore's TrustedRoot, as
// `cosign trusted-root create` writes it or Sigstore's TUF repository
// serves it) and the identities that may sign.
func ParseKeyless(trustedRoot []byte, identities []Identity) (*Keyless, error) {
	tr, err := root.NewTrustedRootFromJSON(trustedRoot)
	if err != nil {
		return nil, fmt.Errorf("is not a Sigstore trusted root (trusted_root.json): %w", err)
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 || len(tr.RekorLogs()) == 0 {
		return nil, errors.New("lists no certificate authority or no transparency log: keyless signatures need both")
	}
	v, err := verify.NewVerifier(tr, verify.WithTransparencyLog(1), verify.WithIntegratedTimestamps(1))
	if err != nil {
		return nil, err
	}
	if len(identities) == 0 {
		return nil, errors.New("no identity may sign: list at least one")
	}
	k := &Keyless{verifier: v, identities: identities}
	for i, id := range identities {
		ci, err := verify.NewShortCertificateIdentity("", anchored(id.Issuer), "", anchored(id.Subject))
		if err != nil {
			return nil, fmt.Errorf("identity %d: %w", i+1, err)
		}
		k.policy = append(k.policy, verify.WithCertificateIdentity(ci))
	}
	return k, nil
}

// anchored makes expr match whole values only.
func anchored(expr string) string { return "^(?:" + expr + ")$" }

func (k *Keyless) String() string {
	ids := make([]string, len(k.identities))
	for i, id := range k.identities {
		ids[i] = id.String()
	}
	return "one of the identities " + strings.Join(ids, ", ")
}

// rekorBundle is the annotation BundleAnnotation: cosign's record of the
// Rekor entry of a signature.
type rekorBundle struct {
	SignedEntryTimestamp []byte `json:"SignedEntryTimestamp"`
	Payload              struct {
		Body           []byte `json:"body"`
		IntegratedTime int64  `json:"integratedTime"`
		LogIndex       int64  `json:"logIndex"`
		LogID          string `json:"logID"`
	} `json:"Payload"`
}

func (k *Keyless) signer(sig, body []byte, annotations map[string]string) (string, error) {
	certPEM, ok := annotations[CertificateAnnotation]
	if !ok {
		return "", errors.New("a signature carries no certificate (it was made with a key: verify it with keysSecret)")
	}
	certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(certPEM))
	if err != nil || len(certs) == 0 {
		return "", errors.New("a signature's certificate is not PEM")
	}
	raw, ok := annotations[BundleAnnotation]
	if !ok {
		return "", fmt.Errorf("the signature of %s was not logged (it carries no %s): keyless signatures are believed only with their transparency log entry", certSubject(certs[0]), BundleAnnotation)
	}
	var rb rekorBundle
	if err := json.Unmarshal([]byte(raw), &rb); err != nil {
		return "", fmt.Errorf("a signature's %s is not a Rekor bundle: %v", BundleAnnotation, err)
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil {
		return "", fmt.Errorf("a signature's %s names log %q, not a hex log ID", BundleAnnotation, rb.Payload.LogID)
	}
	entry, err := tlog.NewEntry(rb.Payload.Body, rb.Payload.IntegratedTime, rb.Payload.LogIndex, logID, rb.SignedEntryTimestamp, nil) //nolint:staticcheck // the one constructor for cosign 2's bundle annotation
	if err != nil {
		return "", fmt.Errorf("a signature's %s holds no Rekor entry: %v", BundleAnnotation, err)
	}
	sum := sha256.Sum256(body)
	entity := &legacySignature{
		cert:    certs[0],
		message: bundle.NewMessageSignature(sum[:], "SHA2_256", sig),
		entries: []*tlog.Entry{entry},
	}
	res, err := k.verifier.Verify(entity, verify.NewPolicy(verify.WithArtifact(bytes.NewReader(body)), k.policy...))
	if err != nil {
		return "", fmt.Errorf("the signature of %s does not verify: %v", certSubject(certs[0]), err)
	}
	who := certSubject(certs[0])
	if s := res.Signature; s != nil && s.Certificate != nil {
		who = s.Certificate.SubjectAlternativeName + " of " + s.Certificate.Issuer
	}
	return "identity " + who, nil
}

// certSubject says whose a certificate is, for messages.
func certSubject(c *x509.Certificate) string {
	switch {
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	}
	return "certificate " + c.Subject.String()
}

// legacySignature is a signature of cosign 2's format as sigstore-go
// verifies a bundle: a message signature by a certificate, logged in
// Rekor with a signed entry timestamp (an inclusion promise).
type legacySignature struct {
	verify.BaseSignedEntity
	cert    *x509.Certificate
	message *bundle.MessageSignature
	entries []*tlog.Entry
}

func (s *legacySignature) VerificationContent() (verify.VerificationContent, error) {
	return bundle.NewCertificate(s.cert), nil
}

func (s *legacySignature) SignatureContent() (verify.SignatureContent, error) {
	return s.message, nil
}

func (s *legacySignature) TlogEntries() ([]*tlog.Entry, error) { return s.entries, nil }

func (s *legacySignature) Timestamps() ([][]byte, error) { return nil, nil }

func (s *legacySignature) HasInclusionPromise() bool { return true }

// Version is the bundle version whose rules apply: v0.1 bundles are
// believed on an inclusion promise, as cosign 2 signatures are.
func (s *legacySignature) Version() (string, error) { return "v0.1", nil }
