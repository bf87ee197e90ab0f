package statestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/terrarun/terrarun/pkg/standalone"
)

func newStore(t *testing.T, limits Limits) *Store {
	t.Helper()
	e, err := standalone.StartEtcd(context.Background(), t.TempDir(), standalone.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return New(cli, nil, limits)
}

func state(serial int, pad int) []byte {
	return []byte(fmt.Sprintf(`{"version":4,"serial":%d,"lineage":"l1","outputs":{},"resources":[],"pad":%q}`, serial, strings.Repeat("x", pad)))
}

// noisyState is a state with n random bytes (as base64) that compress to
// about 3/4 of their size.
func noisyState(t *testing.T, serial, n int) []byte {
	b := make([]byte, n*3/4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(fmt.Sprintf(`{"version":4,"serial":%d,"pad":%q}`, serial, base64.StdEncoding.EncodeToString(b)))
}

var (
	ref     = Ref{Namespace: "team-a", NamespaceUID: "uid-1", Workspace: "default"}
	planner = Holder{Run: "r1", RunUID: "u1", Stage: "plan", Attempt: 1}
	applier = Holder{Run: "r2", RunUID: "u2", Stage: "apply", Attempt: 1}
)

func alive(ok bool) func(context.Context, Holder) (bool, error) {
	return func(context.Context, Holder) (bool, error) { return ok, nil }
}

func TestWritesNeedTheLock(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Limits{})
	if _, _, err := s.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a new state = %v, want ErrNotFound", err)
	}
	if _, err := s.Put(ctx, ref, applier, "L1", state(1, 0)); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Put without the lock = %v, want ErrNotHolder", err)
	}
	if _, err := s.Lock(ctx, ref, applier, "L1", []byte(`{"ID":"L1"}`), alive(true)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, ref, applier, "L2", state(1, 0)); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Put with another lock ID = %v, want ErrNotHolder", err)
	}
	if _, err := s.Put(ctx, ref, planner, "L1", state(1, 0)); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Put by another stage with the holder's ID = %v, want ErrNotHolder", err)
	}
	if _, err := s.Put(ctx, ref, applier, "L1", []byte(`not json`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put of a non-state = %v, want ErrInvalid", err)
	}
	big := noisyState(t, 1, 512<<10) // two chunks, compressed
	v, err := s.Put(ctx, ref, applier, "L1", big)
	if err != nil {
		t.Fatal(err)
	}
	got, gv, err := s.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, big) || gv.Chunks < 2 || gv.Serial != 1 || gv.SHA256 != v.SHA256 || gv.Writer == nil || *gv.Writer != applier {
		t.Fatalf("Get = %d bytes, %+v, %v", len(got), gv, err)
	}
	// The same state in another namespace of the same name (another UID)
	// and in another workspace is another state.
	for _, other := range []Ref{{Namespace: "team-a", NamespaceUID: "uid-2", Workspace: "default"}, {Namespace: "team-a", NamespaceUID: "uid-1", Workspace: "prod"}} {
		if _, _, err := s.Get(ctx, other); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%+v) = %v, want ErrNotFound", other, err)
		}
	}
	if err := s.Unlock(ctx, ref, planner, "L1", false); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Unlock by another stage = %v, want ErrNotHolder", err)
	}
	if err := s.Unlock(ctx, ref, planner, "L2", true); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("forced Unlock of another ID = %v, want ErrNotHolder", err)
	}
	if err := s.Unlock(ctx, ref, applier, "L1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, ref, applier, "L3", nil, alive(true)); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlock(ctx, ref, planner, "L3", true); err != nil {
		t.Fatalf("forced Unlock of the lock's ID = %v", err)
	}
	if l, err := s.LockOf(ctx, ref); l != nil || err != nil {
		t.Fatalf("LockOf after Unlock = %+v, %v", l, err)
	}
}

func TestLocksOfEndedStagesAreBroken(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Limits{})
	if _, err := s.Lock(ctx, ref, planner, "P", nil, alive(true)); err != nil {
		t.Fatal(err)
	}
	held, err := s.Lock(ctx, ref, applier, "A", nil, alive(true))
	if !errors.Is(err, ErrLocked) || held == nil || held.Holder != planner || held.ID != "P" {
		t.Fatalf("Lock while a live stage holds it = %+v, %v; want the holder and ErrLocked", held, err)
	}
	// The holder asks again (the engine retries): it keeps its lock.
	if _, err := s.Lock(ctx, ref, planner, "P2", nil, alive(false)); err != nil {
		t.Fatal(err)
	}
	broken, err := s.Lock(ctx, ref, applier, "A", nil, alive(false))
	if err != nil || broken == nil || broken.Holder != planner {
		t.Fatalf("Lock over an ended stage's lock = %+v, %v; want it broken", broken, err)
	}
	if l, _ := s.LockOf(ctx, ref); l == nil || l.Holder != applier || l.ID != "A" {
		t.Fatalf("the lock is %+v, want the applier's", l)
	}
	if _, err := s.Lock(ctx, ref, applier, "", nil, alive(false)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Lock without an ID = %v, want ErrInvalid", err)
	}
	if _, err := s.Lock(ctx, ref, applier, "A", []byte("{"), alive(false)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Lock with invalid information = %v, want ErrInvalid", err)
	}
}

func TestVersionsAndLimits(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Limits{Versions: 3, State: 2 << 20, Namespace: 600 << 10})
	if _, err := s.Lock(ctx, ref, applier, "L", nil, alive(true)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := s.Put(ctx, ref, applier, "L", state(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := s.Versions(ctx, ref)
	if err != nil || len(vs) != 3 || vs[0].Serial != 5 || vs[2].Serial != 3 {
		t.Fatalf("versions = %+v, %v; want serials 5, 4, 3", vs, err)
	}
	resp, err := s.client.Get(ctx, s.prefix+"data/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 3 {
		t.Fatalf("%d chunks stored, want those of the 3 versions kept (%v)", resp.Count, err)
	}
	if _, err := s.Put(ctx, ref, applier, "L", state(6, 3<<20)); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "2097152") {
		t.Fatalf("Put over the state limit = %v, want ErrTooLarge naming it", err)
	}
	// Incompressible bytes over the namespace's budget, in another state.
	other := Ref{Namespace: "team-a", NamespaceUID: "uid-1", Workspace: "prod"}
	if _, err := s.Lock(ctx, other, applier, "L", nil, alive(true)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, other, applier, "L", noisyState(t, 1, 900<<10)); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "namespace team-a") {
		t.Fatalf("Put over the namespace's budget = %v, want ErrTooLarge naming the namespace", err)
	}
	// Deleting the namespace's states frees everything of it.
	if err := s.DeleteNamespace(ctx, "team-a", "uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after DeleteNamespace = %v", err)
	}
	if ns, err := s.Namespaces(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("Namespaces after DeleteNamespace = %v, %v", ns, err)
	}
}

func TestImportOnlyIntoANewState(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Limits{})
	ok, err := s.Import(ctx, ref, "Secret team-a/tfstate-default-default", state(7, 0))
	if err != nil || !ok {
		t.Fatalf("Import into a new state = %v, %v", ok, err)
	}
	if ok, err := s.Import(ctx, ref, "elsewhere", state(8, 0)); err != nil || ok {
		t.Fatalf("Import over a state = %v, %v; want nothing stored", ok, err)
	}
	_, v, err := s.Get(ctx, ref)
	if err != nil || v.Serial != 7 || v.ImportedFrom != "Secret team-a/tfstate-default-default" {
		t.Fatalf("Get = %+v, %v", v, err)
	}
	if ns, err := s.Namespaces(ctx); err != nil || !ns[[2]string{"team-a", "uid-1"}] || len(ns) != 1 {
		t.Fatalf("Namespaces = %v, %v", ns, err)
	}
}
