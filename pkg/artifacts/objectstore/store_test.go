package objectstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
)

func testKeys(t *testing.T, primary string, ids ...string) (*Keyring, map[string]string) {
	t.Helper()
	keys := map[string]string{}
	for _, id := range ids {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		keys[id] = base64.StdEncoding.EncodeToString(b)
	}
	k, err := NewKeyring(primary, keys)
	if err != nil {
		t.Fatal(err)
	}
	return k, keys
}

func newStore(t *testing.T, srv *objectstoretest.Server, keys *Keyring) *Store {
	t.Helper()
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	s, err := New(Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "artifacts", PathStyle: true, Region: "us-east-1", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, s *Store, name string, off, n int64) ([]byte, error) {
	t.Helper()
	rc, _, err := s.Get(context.Background(), name, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestRoundTrip stores objects of sizes around the segment boundaries,
// encrypted and not, in a real S3-compatible server, and reads every one
// back whole and in ranges; the bucket holds no plaintext of an encrypted
// one.
func TestRoundTrip(t *testing.T) {
	srv := objectstoretest.Start(t)
	keys, _ := testKeys(t, "k1", "k1")
	for _, tc := range []struct {
		name string
		keys *Keyring
	}{{"encrypted", keys}, {"plain", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, srv, tc.keys)
			for _, size := range []int{0, 1, segmentSize - 1, segmentSize, segmentSize + 1, 3*segmentSize + 17} {
				plain := bytes.Repeat([]byte("secret-plan-line "), size/17+1)[:size]
				name := tc.name + "/" + string(rune('a'+size%26)) + "-" + strings.Repeat("x", size%7)
				if err := s.Put(context.Background(), name, bytes.NewReader(plain)); err != nil {
					t.Fatalf("put %d bytes: %v", size, err)
				}
				got, err := get(t, s, name, 0, -1)
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("%d bytes: read %d bytes back, %v", size, len(got), err)
				}
				for _, r := range [][2]int64{{0, 1}, {int64(size) / 2, 100}, {int64(size) - 5, 5}, {segmentSize - 3, 10}, {int64(size), 0}} {
					if r[0] < 0 || r[0] > int64(size) {
						continue
					}
					want := plain[r[0]:min(int64(size), r[0]+r[1])]
					if got, err := get(t, s, name, r[0], r[1]); err != nil || !bytes.Equal(got, want) {
						t.Errorf("%d bytes, range %v: %q, %v; want %d bytes", size, r, got, err, len(want))
					}
				}
				stored, err := os.ReadFile(srv.ObjectPath("artifacts/" + name))
				if err != nil {
					t.Fatal(err)
				}
				if tc.keys != nil && size > 17 && bytes.Contains(stored, []byte("secret-plan-line")) {
					t.Errorf("the bucket holds the plaintext of an encrypted object of %d bytes", size)
				}
			}
		})
	}
}

// TestTampering: an encrypted object whose bytes, segments or name were
// changed in the bucket fails with ErrTampered, whole and in ranges.
func TestTampering(t *testing.T) {
	srv := objectstoretest.Start(t)
	keys, _ := testKeys(t, "k1", "k1")
	s := newStore(t, srv, keys)
	ctx := context.Background()
	plain := bytes.Repeat([]byte{'p'}, 2*segmentSize+100)
	for _, name := range []string{"flipped", "cut", "moved", "other"} {
		if err := s.Put(ctx, name, bytes.NewReader(plain)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"empty", "another-empty"} {
		if err := s.Put(ctx, name, bytes.NewReader(nil)); err != nil {
			t.Fatal(err)
		}
	}
	path := func(name string) string { return srv.ObjectPath("artifacts/" + name) }
	b, _ := os.ReadFile(path("flipped"))
	b[sealedSeg+10] ^= 1
	if err := os.WriteFile(path("flipped"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path("cut"))
	if err := os.WriteFile(path("cut"), b[:2*sealedSeg], 0o600); err != nil {
		t.Fatal(err)
	}
	// "moved" gets the bytes of "other": same key, another name.
	b, _ = os.ReadFile(path("other"))
	if err := os.WriteFile(path("moved"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// "empty" gets the bytes of another empty object.
	b, _ = os.ReadFile(path("another-empty"))
	if err := os.WriteFile(path("empty"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"flipped", "cut", "moved", "empty"} {
		if _, err := get(t, s, name, 0, -1); !errors.Is(err, ErrTampered) {
			t.Errorf("%s, whole: %v, want ErrTampered", name, err)
		}
	}
	if _, err := get(t, s, "flipped", segmentSize+5, 10); !errors.Is(err, ErrTampered) {
		t.Errorf("flipped, its range: %v, want ErrTampered", err)
	}
	if got, err := get(t, s, "flipped", 0, 10); err != nil || string(got) != "pppppppppp" {
		t.Errorf("flipped, an untouched range: %q, %v", got, err)
	}
}

// TestKeyRotation: objects wrapped by an older key stay readable while it
// is in the keyring; without it, a read fails naming the key id.
func TestKeyRotation(t *testing.T) {
	srv := objectstoretest.Start(t)
	old, oldKeys := testKeys(t, "2026-01", "2026-01")
	ctx := context.Background()
	if err := newStore(t, srv, old).Put(ctx, "plan", strings.NewReader("plan bytes")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	both := map[string]string{"2026-01": oldKeys["2026-01"], "2026-06": base64.StdEncoding.EncodeToString(b)}
	rotated, err := NewKeyring("2026-06", both)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, srv, rotated)
	if err := s.Put(ctx, "new", strings.NewReader("new bytes")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"plan": "plan bytes", "new": "new bytes"} {
		if got, err := get(t, s, name, 0, -1); err != nil || string(got) != want {
			t.Errorf("%s after rotation: %q, %v", name, got, err)
		}
	}
	delete(both, "2026-01")
	newOnly, err := NewKeyring("2026-06", both)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, newStore(t, srv, newOnly), "plan", 0, -1); err == nil || !strings.Contains(err.Error(), `encrypted with key "2026-01", which the keyring does not hold`) {
		t.Errorf("reading without its key: %v", err)
	}
	if _, err := get(t, newStore(t, srv, nil), "plan", 0, -1); err == nil || !strings.Contains(err.Error(), `encrypted with key "2026-01"`) {
		t.Errorf("reading without keys: %v", err)
	}
}

func TestDeleteAndList(t *testing.T) {
	srv := objectstoretest.Start(t)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	for _, name := range []string{"runs/a/plan", "runs/a/log", "runs/b/plan"} {
		if err := s.Put(ctx, name, strings.NewReader(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "runs/a/log"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "runs/a/log"); err != nil {
		t.Errorf("deleting a missing object: %v", err)
	}
	var names []string
	if err := s.List(ctx, "runs/", func(name string, _ time.Time) error { names = append(names, name); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "runs/a/plan,runs/b/plan" {
		t.Errorf("listed %v", names)
	}
	if _, err := get(t, s, "runs/a/log", 0, -1); !errors.Is(err, ErrNotFound) {
		t.Errorf("reading a deleted object: %v", err)
	}
}

func TestLoadKeyring(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "keys.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	if k, err := LoadKeyring(write("primary: a\nkeys:\n  a: " + key + "\n")); err != nil || k.primary != "a" {
		t.Errorf("a valid keyring: %v", err)
	}
	for body, want := range map[string]string{
		"primary: b\nkeys:\n  a: " + key + "\n":       `primary: "b" is not one of the keys`,
		"primary: a\nkeys:\n  a: c2hvcnQ=\n":          "keys.a: must be the base64 of 32 random bytes",
		"primary: a\nkeys:\n  a: " + key + "\nx: 1\n": "unknown field",
		"primary: '../a'\nkeys:\n  '../a': " + key:    "key id",
	} {
		if _, err := LoadKeyring(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
