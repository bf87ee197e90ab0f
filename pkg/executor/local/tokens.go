package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
)

// The user that a stage token authenticates as.
const (
	// UserPrefix prefixes the user name: UserPrefix + "<namespace>:<run>".
	UserPrefix = "system:terrarun:executor:"
	// ExecutorsGroup is the group of every executor user.
	ExecutorsGroup = "system:terrarun:executors"
	// ExtraRunUID, ExtraStage and ExtraAttempt are the user's extra keys.
	ExtraRunUID  = "terrarun.dev/run-uid"
	ExtraStage   = "terrarun.dev/stage"
	ExtraAttempt = "terrarun.dev/attempt"
	// ExtraTokenHash binds the user to the credential it was authenticated
	// with: the hex sha256 of the stage token. A user whose extras name a live
	// identity without the hash of its current token is not an executor.
	ExtraTokenHash = "terrarun.dev/token-sha256"
)

// Tokens is the authority for per-stage bearer tokens in local mode. It issues
// one random 256-bit token per stage execution, authenticates it until it is
// revoked, and maps the resulting user back to the executor identity.
//
// Only a sha256 of each token is kept, and lookups compare every stored hash in
// constant time. Tokens live in memory: after a server restart, the executors
// it started are gone too.
//
// The zero value is ready to use.
type Tokens struct {
	mu     sync.RWMutex
	hashes map[executor.Identity][sha256.Size]byte
}

var (
	_ authenticator.Token = (*Tokens)(nil)
	_ auth.Resolver       = (*Tokens)(nil)
)

// newTokens returns an empty token authority.
func newTokens() *Tokens { return &Tokens{} }

// Issue returns a new token for id (base64url, 256 random bits), valid until
// Revoke(id). A token issued earlier for the same id stops being valid.
func (t *Tokens) Issue(id executor.Identity) (string, error) {
	if err := validIdentity(id); err != nil {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating executor token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hashes == nil {
		t.hashes = map[executor.Identity][sha256.Size]byte{}
	}
	t.hashes[id] = sha256.Sum256([]byte(tok))
	return tok, nil
}

// Revoke invalidates the token of id, if any.
func (t *Tokens) Revoke(id executor.Identity) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.hashes, id)
}

// AuthenticateToken implements authenticator.Token. A token that is not live
// is not an error: it yields false, so that other authenticators may try it.
func (t *Tokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if token == "" {
		return nil, false, nil
	}
	sum := sha256.Sum256([]byte(token))
	var (
		found executor.Identity
		ok    bool
	)
	t.mu.RLock()
	// Compare against every hash, without stopping at a match.
	for id, h := range t.hashes {
		if subtle.ConstantTimeCompare(h[:], sum[:]) == 1 {
			found, ok = id, true
		}
	}
	t.mu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: executorUser(found, sum)}, true, nil
}

// ExecutorIdentity implements auth.Resolver: it reads the identity
// back from a user produced by AuthenticateToken. Any other user, and the user
// of an identity whose token has been revoked, yields false.
func (t *Tokens) ExecutorIdentity(ctx context.Context, u user.Info) (executor.Identity, bool, error) {
	id, sum, ok := identityFromUser(u)
	if !ok {
		return executor.Identity{}, false, nil
	}
	t.mu.RLock()
	current, live := t.hashes[id]
	t.mu.RUnlock()
	if !live || subtle.ConstantTimeCompare(current[:], sum[:]) != 1 {
		return executor.Identity{}, false, nil
	}
	return id, true, nil
}

// executorUser is the user that a token of id, whose sha256 is sum,
// authenticates as.
func executorUser(id executor.Identity, sum [sha256.Size]byte) *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   UserPrefix + id.Namespace + ":" + id.Name,
		Groups: []string{ExecutorsGroup, user.AllAuthenticated},
		Extra: map[string][]string{
			ExtraRunUID:    {id.UID},
			ExtraStage:     {string(id.Stage)},
			ExtraAttempt:   {strconv.FormatInt(int64(id.Attempt), 10)},
			ExtraTokenHash: {hex.EncodeToString(sum[:])},
		},
	}
}

// identityFromUser reads the identity and the token hash from the name,
// groups and extras of u.
func identityFromUser(u user.Info) (id executor.Identity, sum [sha256.Size]byte, ok bool) {
	if u == nil {
		return id, sum, false
	}
	rest, ok := strings.CutPrefix(u.GetName(), UserPrefix)
	if !ok {
		return id, sum, false
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok {
		return id, sum, false
	}
	inGroup := false
	for _, g := range u.GetGroups() {
		if g == ExecutorsGroup {
			inGroup = true
		}
	}
	if !inGroup {
		return id, sum, false
	}
	extra := u.GetExtra()
	one := func(k string) (string, bool) {
		v := extra[k]
		if len(v) != 1 {
			return "", false
		}
		return v[0], true
	}
	uid, ok1 := one(ExtraRunUID)
	stg, ok2 := one(ExtraStage)
	att, ok3 := one(ExtraAttempt)
	hash, ok4 := one(ExtraTokenHash)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return id, sum, false
	}
	n, err := strconv.ParseInt(att, 10, 32)
	if err != nil {
		return id, sum, false
	}
	b, err := hex.DecodeString(hash)
	if err != nil || len(b) != sha256.Size {
		return id, sum, false
	}
	copy(sum[:], b)
	id = executor.Identity{Namespace: ns, Name: name, UID: uid, Stage: v1alpha1.StageName(stg), Attempt: int32(n)}
	if validIdentity(id) != nil {
		return executor.Identity{}, sum, false
	}
	return id, sum, true
}

func validIdentity(id executor.Identity) error {
	switch {
	case id.Namespace == "" || id.Name == "" || id.UID == "":
		return fmt.Errorf("executor identity needs a namespace, a name and a uid")
	case strings.Contains(id.Namespace, ":") || strings.Contains(id.Name, ":"):
		return fmt.Errorf("invalid executor identity %s/%s", id.Namespace, id.Name)
	case id.Stage != v1alpha1.StagePlan && id.Stage != v1alpha1.StageApply:
		return fmt.Errorf("invalid stage %q: must be %q or %q", id.Stage, v1alpha1.StagePlan, v1alpha1.StageApply)
	case id.Attempt < 1:
		return fmt.Errorf("invalid attempt %d: attempts count from 1", id.Attempt)
	}
	return nil
}
