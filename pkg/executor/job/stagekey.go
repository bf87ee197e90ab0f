package job

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/stage"
)

// StageKeys derives each stage attempt's key from a secret that only
// terrarun's replicas hold: an HMAC of the run's namespace, name and UID,
// the stage and the attempt. A Job's stage Secret holds its key, which its
// executor sends with every request (stage.StageKeyHeader); the server asks
// for it beside the pod-bound token. So a token that anyone with create
// serviceaccounts/token can mint for the stage's pod is not the stage's
// credential without the key, which only the pod's mount, or whoever may
// read the namespace's Secrets or create pods that mount them, reaches.
type StageKeys struct {
	secret []byte
}

// NewStageKeys returns the keys derived from secret (32 random bytes, shared
// by the replicas).
func NewStageKeys(secret []byte) (*StageKeys, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("the stage key secret has %d bytes, want at least 32", len(secret))
	}
	return &StageKeys{secret: append([]byte(nil), secret...)}, nil
}

// For returns the key of the stage attempt id, in hex.
func (k *StageKeys) For(id executor.Identity) string {
	m := hmac.New(sha256.New, k.secret)
	fmt.Fprintf(m, "terrarun.dev/stage-key/v1\n%s\n%s\n%s\n%s\n%d\n", id.Namespace, id.Name, id.UID, id.Stage, id.Attempt)
	return hex.EncodeToString(m.Sum(nil))
}

// ProveRequest implements auth.RequestProver: req carries the key of id's
// stage attempt.
func (r *IdentityResolver) ProveRequest(req *http.Request, _ user.Info, id executor.Identity) error {
	if r.keys == nil {
		return nil
	}
	got := req.Header.Get(stage.StageKeyHeader)
	if got == "" {
		return fmt.Errorf("%w: the request of the %s stage of run %s/%s carries no stage key (%s): a token minted for its pod is not the stage's credential",
			auth.ErrRejected, id.Stage, id.Namespace, id.Name, stage.StageKeyHeader)
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(r.keys.For(id))) != 1 {
		return fmt.Errorf("%w: the stage key of the request is not that of the %s stage, attempt %d, of run %s/%s", auth.ErrRejected, id.Stage, id.Attempt, id.Namespace, id.Name)
	}
	return nil
}
