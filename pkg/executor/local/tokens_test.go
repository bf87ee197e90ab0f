package local

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/executor"
)

func TestTokens(t *testing.T) {
	ctx := context.Background()
	var tokens Tokens // the zero value works
	id := executor.Identity{Namespace: "team-a", Name: "web", UID: "uid-1", Stage: "plan", Attempt: 2}
	other := executor.Identity{Namespace: "team-a", Name: "db", UID: "uid-2", Stage: "apply", Attempt: 1}

	tok, err := tokens.Issue(id)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(raw) != 32 {
		t.Fatalf("token %q is not 256 bits of base64url: %v", tok, err)
	}
	tok2, err := tokens.Issue(other)
	if err != nil {
		t.Fatal(err)
	}

	resp, ok, err := tokens.AuthenticateToken(ctx, tok)
	if err != nil || !ok {
		t.Fatalf("authenticate: %v %v", ok, err)
	}
	u := resp.User
	if u.GetName() != "system:terrarun:executor:team-a:web" {
		t.Errorf("name = %q", u.GetName())
	}
	if g := u.GetGroups(); len(g) != 2 || g[0] != "system:terrarun:executors" || g[1] != user.AllAuthenticated {
		t.Errorf("groups = %v", g)
	}
	ex := u.GetExtra()
	if ex["terrarun.dev/run-uid"][0] != "uid-1" || ex["terrarun.dev/stage"][0] != "plan" || ex["terrarun.dev/attempt"][0] != "2" {
		t.Errorf("extra = %v", ex)
	}
	got, ok, err := tokens.ExecutorIdentity(ctx, u)
	if err != nil || !ok || got != id {
		t.Fatalf("identity = %+v %v %v", got, ok, err)
	}
	if resp, ok, _ := tokens.AuthenticateToken(ctx, tok2); !ok || resp.User.GetName() != "system:terrarun:executor:team-a:db" {
		t.Fatalf("second token: %v", ok)
	}

	// Near misses, empty and foreign tokens are not authenticated (and not errors).
	flipped := []byte(tok)
	if flipped[len(flipped)-1] == 'A' {
		flipped[len(flipped)-1] = 'B'
	} else {
		flipped[len(flipped)-1] = 'A'
	}
	for _, bad := range []string{"", string(flipped), tok[:len(tok)-1], tok + "A", "not-a-token"} {
		if resp, ok, err := tokens.AuthenticateToken(ctx, bad); ok || err != nil || resp != nil {
			t.Errorf("AuthenticateToken(%q) = %v, %v, %v", bad, resp, ok, err)
		}
	}

	// Users that are not (live) executors.
	for name, u := range map[string]user.Info{
		"admin":         &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}},
		"no extra":      &user.DefaultInfo{Name: "system:terrarun:executor:team-a:web", Groups: []string{ExecutorsGroup}},
		"no group":      &user.DefaultInfo{Name: u.GetName(), Extra: u.GetExtra()},
		"bad attempt":   withExtra(u, ExtraAttempt, "x"),
		"bad stage":     withExtra(u, ExtraStage, "destroy"),
		"other uid":     withExtra(u, ExtraRunUID, "uid-9"),
		"two uids":      &user.DefaultInfo{Name: u.GetName(), Groups: u.GetGroups(), Extra: map[string][]string{ExtraRunUID: {"uid-1", "uid-2"}, ExtraStage: {"plan"}, ExtraAttempt: {"2"}}},
		"no namespace":  &user.DefaultInfo{Name: "system:terrarun:executor:web", Groups: u.GetGroups(), Extra: u.GetExtra()},
		"other attempt": withExtra(u, ExtraAttempt, "3"),
		// Name, groups and extras alone never make an executor: the user must
		// carry the hash of the identity's current token.
		"no token hash":    withoutExtra(u, ExtraTokenHash),
		"other token hash": withExtra(u, ExtraTokenHash, hex.EncodeToString(make([]byte, sha256.Size))),
		"bad token hash":   withExtra(u, ExtraTokenHash, "zz"),
		"nil":              nil,
	} {
		if got, ok, err := tokens.ExecutorIdentity(ctx, u); ok || err != nil {
			t.Errorf("%s: identity = %+v %v %v", name, got, ok, err)
		}
	}
	// A user built for a live identity and its token resolves: executorUser is
	// the round trip.
	if got, ok, _ := tokens.ExecutorIdentity(ctx, executorUser(other, sha256.Sum256([]byte(tok2)))); !ok || got != other {
		t.Errorf("round trip = %+v %v", got, ok)
	}

	// Reissuing replaces the token.
	tok3, err := tokens.Issue(id)
	if err != nil || tok3 == tok {
		t.Fatal(err)
	}
	if _, ok, _ := tokens.AuthenticateToken(ctx, tok); ok {
		t.Error("the replaced token still authenticates")
	}
	if _, ok, _ := tokens.AuthenticateToken(ctx, tok3); !ok {
		t.Error("the new token does not authenticate")
	}
	// The user of the replaced token names the same identity, but no longer
	// resolves to it.
	if _, ok, _ := tokens.ExecutorIdentity(ctx, u); ok {
		t.Error("the user of a replaced token still resolves")
	}

	// Revoke.
	tokens.Revoke(id)
	if _, ok, _ := tokens.AuthenticateToken(ctx, tok3); ok {
		t.Error("a revoked token authenticates")
	}
	if _, ok, _ := tokens.ExecutorIdentity(ctx, u); ok {
		t.Error("a revoked identity resolves")
	}
	if _, ok, _ := tokens.AuthenticateToken(ctx, tok2); !ok {
		t.Error("revoking one identity revoked another")
	}
	tokens.Revoke(id) // idempotent

	for _, bad := range []executor.Identity{
		{Name: "x", UID: "u", Stage: "plan", Attempt: 1},
		{Namespace: "a:b", Name: "x", UID: "u", Stage: "plan", Attempt: 1},
		{Namespace: "a", Name: "x", UID: "u", Stage: "other", Attempt: 1},
		{Namespace: "a", Name: "x", UID: "u", Stage: "plan", Attempt: 0},
	} {
		if _, err := tokens.Issue(bad); err == nil {
			t.Errorf("Issue(%+v) succeeded", bad)
		}
	}
}

func withoutExtra(u user.Info, key string) user.Info {
	extra := map[string][]string{}
	for k, v := range u.GetExtra() {
		if k != key {
			extra[k] = v
		}
	}
	return &user.DefaultInfo{Name: u.GetName(), Groups: u.GetGroups(), Extra: extra}
}

func withExtra(u user.Info, key, value string) user.Info {
	extra := map[string][]string{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	extra[key] = []string{value}
	return &user.DefaultInfo{Name: u.GetName(), Groups: u.GetGroups(), Extra: extra}
}
