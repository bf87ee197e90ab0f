package artifacts

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrarun/terrarun/pkg/artifacts/objectstore"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
)

// objectStore starts a real S3-compatible server and returns an encrypting
// store of its bucket.
func objectStore(t *testing.T) (*objectstore.Store, *objectstoretest.Server) {
	t.Helper()
	srv := objectstoretest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	keys, err := objectstore.NewKeyring("k1", map[string]string{"k1": base64.StdEncoding.EncodeToString(randomBytes(t, 32))})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objectstore.New(objectstore.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "terrarun", PathStyle: true, Region: "us-east-1", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return objs, srv
}

// bucketHolds reports whether any file of the bucket contains b.
func bucketHolds(t *testing.T, srv *objectstoretest.Server, b []byte) bool {
	t.Helper()
	found := false
	err := filepath.Walk(srv.Root, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found = found || bytes.Contains(data, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// waitMoved waits until the log of stage attempt 1 of testRun names its
// object.
func waitMoved(t *testing.T, ctx context.Context, s *Store, stage string) logMeta {
	t.Helper()
	return waitMovedAttempt(t, ctx, s, stage, 1)
}

// waitMovedAttempt waits until the log of a stage attempt of testRun names
// its object.
func waitMovedAttempt(t *testing.T, ctx context.Context, s *Store, stage string, attempt int32) logMeta {
	t.Helper()
	keys, err := s.logKeys(testRun, stage, attempt)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := s.client.Get(ctx, keys.meta)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
		if err != nil {
			t.Fatal(err)
		}
		if cur.meta.Object != "" {
			return cur.meta
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed %s log was not moved into the object store in 30s: %+v", stage, cur.meta)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func logLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "line %05d of the apply: hunter2-secret-value\n", i)
	}
	return b.String()
}

// TestFinishedLogMovesIntoTheObjectStore: a closed log leaves etcd for one
// encrypted object, and is served from it whole, by its last lines and by
// bytes, exactly as it was served from etcd.
func TestFinishedLogMovesIntoTheObjectStore(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, srv := objectStore(t)
	s := New(cli, Options{Objects: objs, ChunkSize: 1024})
	go s.RunObjectMaintenance(ctx)
	content := logLines(3000) // 150 KiB: objects of several segments, tails across blocks
	etcdOnly := New(cli, Options{ChunkSize: 1024, Prefix: "/etcd-only/"})
	for _, st := range []*Store{s, etcdOnly} {
		if err := st.AppendLog(ctx, testRun, "apply", 1, []byte(content[:70000])); err != nil {
			t.Fatal(err)
		}
		if err := st.EndLog(ctx, testRun, "apply", 1, []byte(content[70000:])); err != nil {
			t.Fatal(err)
		}
	}
	m := waitMoved(t, ctx, s, "apply")
	if m.Size != int64(len(content)) || m.SHA256 != sum([]byte(content)) {
		t.Fatalf("moved log meta %+v, want %d bytes %s", m, len(content), sum([]byte(content)))
	}
	lk, _ := s.logKeys(testRun, "apply", 1)
	if left := keys(t, cli, lk.chunks); len(left) != 0 {
		t.Fatalf("%d chunks of the moved log stay in etcd", len(left))
	}
	if left := keys(t, cli, s.usageKey(testRun, "apply", 1)); len(left) != 0 {
		t.Fatal("the moved log still counts against the etcd log budgets")
	}
	if bucketHolds(t, srv, []byte("hunter2-secret-value")) {
		t.Fatal("the bucket holds the log in plaintext")
	}
	for _, opts := range []LogOptions{
		{}, {Follow: true},
		{TailLines: ptr[int64](0)}, {TailLines: ptr[int64](1)}, {TailLines: ptr[int64](100)}, {TailLines: ptr[int64](2999)}, {TailLines: ptr[int64](5000)},
		{LimitBytes: ptr[int64](0)}, {LimitBytes: ptr[int64](100)}, {LimitBytes: ptr[int64](int64(len(content)) + 5)},
		{TailLines: ptr[int64](2000), LimitBytes: ptr[int64](70000)},
	} {
		want := streamAll(t, etcdOnly, ctx, testRun, "apply", 1, opts)
		if got := streamAll(t, s, ctx, testRun, "apply", 1, opts); got != want {
			t.Fatalf("options %s: the object store served %d bytes (%.40q...), etcd %d (%.40q...)", describe(opts), len(got), got, len(want), want)
		}
	}

	// A byte changed in the bucket fails the read.
	var object string
	_ = filepath.Walk(srv.Root, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.Contains(path, "/log/apply/") {
			object = path
		}
		return nil
	})
	data, err := os.ReadFile(object)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(object, data, 0o600); err != nil {
		t.Fatal(err)
	}
	err = s.StreamLog(ctx, testRun, "apply", 1, LogOptions{TailLines: ptr[int64](10)}, &bytes.Buffer{})
	if err == nil {
		err = s.StreamLog(ctx, testRun, "apply", 1, LogOptions{}, &bytes.Buffer{})
	}
	if !errors.Is(err, objectstore.ErrTampered) {
		t.Fatalf("a tampered log object was served: %v", err)
	}

	// Deleting the run deletes the object.
	if err := s.DeleteRun(ctx, testRun); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := objs.List(ctx, objectPrefix(testRun), func(string, time.Time) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d objects of the deleted run stay", n)
	}
}

func describe(o LogOptions) string {
	var parts []string
	if o.Follow {
		parts = append(parts, "follow")
	}
	if o.TailLines != nil {
		parts = append(parts, fmt.Sprintf("tailLines=%d", *o.TailLines))
	}
	if o.LimitBytes != nil {
		parts = append(parts, fmt.Sprintf("limitBytes=%d", *o.LimitBytes))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// pausingWriter runs pause once, at its first write.
type pausingWriter struct {
	bytes.Buffer
	pause func()
}

func (w *pausingWriter) Write(p []byte) (int, error) {
	if w.pause != nil {
		w.pause()
		w.pause = nil
	}
	return w.Buffer.Write(p)
}

// TestReadGoesOnWhenTheLogMoves: a read that is part-way through a log's
// chunks when they move into the object store goes on from the object at
// the byte it reached, with nothing lost or repeated.
func TestReadGoesOnWhenTheLogMoves(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, _ := objectStore(t)
	s := New(cli, Options{Objects: objs, ChunkSize: 1024})
	content := logLines(70000) // 3.2 MB: more than one batch of reads
	lines := strings.SplitAfter(content, "\n")
	for i, opts := range []LogOptions{{}, {TailLines: ptr[int64](60000)}} {
		attempt := int32(i + 1)
		if err := s.EndLog(ctx, testRun, "plan", attempt, []byte(content)); err != nil {
			t.Fatal(err)
		}
		moved := false
		w := &pausingWriter{pause: func() {
			if _, err := s.compactLog(ctx, logRef{testRun, "plan", attempt}); err != nil {
				t.Fatal(err)
			}
			lk, _ := s.logKeys(testRun, "plan", attempt)
			moved = len(keys(t, cli, lk.chunks)) == 0
		}}
		if err := s.StreamLog(ctx, testRun, "plan", attempt, opts, w); err != nil {
			t.Fatalf("options %s: %v", describe(opts), err)
		}
		if !moved {
			t.Fatalf("options %s: the log's chunks stayed in etcd", describe(opts))
		}
		want := content
		if opts.TailLines != nil {
			want = strings.Join(lines[len(lines)-1-int(*opts.TailLines):], "")
		}
		if w.String() != want {
			t.Fatalf("options %s: read %d bytes across the move, want %d", describe(opts), w.Len(), len(want))
		}
	}
}

// TestSweepOrphans: the objects of a run with no key left in etcd (its
// deletion failed half-way, or its lease expired) are deleted once older
// than the grace; a run with keys keeps its objects, and an upload younger
// than the grace, whose keys may not be written yet, is left alone.
func TestSweepOrphans(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, _ := objectStore(t)
	s := New(cli, Options{Objects: objs})
	kept, orphan := testRun, RunRef{Namespace: "team-a", Name: "gone", UID: "4f1c9a6e-0000-4000-8000-000000000002"}
	for _, run := range []RunRef{kept, orphan} {
		if _, err := s.Put(ctx, run, PlanText, strings.NewReader("plan of "+run.Name)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, run, Outputs, strings.NewReader("{}")); err != nil {
			t.Fatal(err)
		}
	}
	// The orphan's keys go, as when DeleteRun deleted them and failed
	// before the objects.
	if _, err := cli.Delete(ctx, s.runBase(orphan), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	count := func(run RunRef) int {
		n := 0
		if err := objs.List(ctx, objectPrefix(run), func(string, time.Time) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, err := s.SweepOrphans(ctx, time.Hour); err != nil || n != 0 || count(orphan) != 2 {
		t.Fatalf("within the grace: deleted %d (%v), the orphan keeps %d objects", n, err, count(orphan))
	}
	if n, err := s.SweepOrphans(ctx, 0); err != nil || n != 2 || count(orphan) != 0 {
		t.Fatalf("after the grace: deleted %d (%v), the orphan keeps %d objects", n, err, count(orphan))
	}
	if count(kept) != 2 {
		t.Fatalf("the run with keys lost objects: %d left", count(kept))
	}
}

// TestMigrateToObjects: what a server kept in etcd before it had an object
// store moves there, each artifact whole or not at all, and reads back the
// same; a second pass moves nothing; a log still being written stays.
func TestMigrateToObjects(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	before := New(cli, Options{ChunkSize: 1024})
	parts := map[Kind][]byte{PlanFile: randomBytes(t, 5000), PlanText: []byte(logLines(100)), PlanJSON: []byte(`{"resource_changes":[]}`), PlanSource: randomBytes(t, 3000), Outputs: []byte(`{"url":{"value":"x"}}`)}
	for kind, b := range parts {
		if _, err := before.Put(ctx, testRun, kind, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := before.EndLog(ctx, testRun, "plan", 1, []byte(logLines(200))); err != nil {
		t.Fatal(err)
	}
	if err := before.AppendLog(ctx, testRun, "apply", 1, []byte("still applying\n")); err != nil {
		t.Fatal(err)
	}
	objs, srv := objectStore(t)
	s := New(cli, Options{Objects: objs, ChunkSize: 1024})
	// Two replicas start with the object store at once: each artifact is
	// moved by one of them, and the other's object goes.
	other := New(cli, Options{Objects: objs, ChunkSize: 1024})
	results := make(chan Migrated, 2)
	errs := make(chan error, 2)
	for _, st := range []*Store{s, other} {
		go func() {
			m, err := st.MigrateToObjects(ctx)
			results <- m
			errs <- err
		}()
	}
	var moved Migrated
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		m := <-results
		moved.Artifacts, moved.Bytes, moved.Logs = moved.Artifacts+m.Artifacts, moved.Bytes+m.Bytes, moved.Logs+m.Logs
	}
	var want int64
	for _, b := range parts {
		want += int64(len(b))
	}
	if moved.Artifacts != len(parts) || moved.Bytes != want || moved.Logs != 1 {
		t.Fatalf("moved %+v, want %d artifacts of %d bytes and 1 log", moved, len(parts), want)
	}
	for kind, b := range parts {
		got, _ := readAll(t, s, ctx, testRun, kind)
		if !bytes.Equal(got, b) {
			t.Errorf("%s read back after the move differs", kind)
		}
		ak, _, _ := s.artifactKeys(testRun, kind)
		if left := keys(t, cli, ak.dir); len(left) != 1 {
			t.Errorf("%s: %d keys left in etcd, want its meta only", kind, len(left))
		}
	}
	if got := streamAll(t, s, ctx, testRun, "plan", 1, LogOptions{}); got != logLines(200) {
		t.Error("the moved log reads back otherwise")
	}
	if bucketHolds(t, srv, []byte("hunter2-secret-value")) {
		t.Error("the bucket holds plaintext")
	}
	n := 0
	if err := objs.List(ctx, objectPrefix(testRun), func(string, time.Time) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != len(parts)+1 {
		t.Errorf("%d objects after two migrations at once, want %d: one per artifact and log", n, len(parts)+1)
	}
	if again, err := s.MigrateToObjects(ctx); err != nil || again != (Migrated{}) {
		t.Errorf("a second pass moved %+v (%v)", again, err)
	}
	lk, _ := s.logKeys(testRun, "apply", 1)
	if len(keys(t, cli, lk.chunks)) != 1 {
		t.Error("a log still being written left etcd")
	}
}

// TestPartsAreContentAddressed: a part whose sender declared its digest is
// stored under its content's address, and refused (nothing stored) when its
// bytes hash otherwise; the same bytes uploaded again write the same
// object, and an upload of them that fails leaves the stored one in place.
func TestPartsAreContentAddressed(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, _ := objectStore(t)
	s := New(cli, Options{Objects: objs})
	text := []byte(logLines(50))
	digest := sum(text)
	names := func() []string {
		var out []string
		if err := objs.List(ctx, objectPrefix(testRun), func(name string, _ time.Time) error { out = append(out, name); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := objectPrefix(testRun) + "plan-text/sha256-" + strings.TrimPrefix(digest, "sha256:")
	for range 2 {
		if _, err := s.Put(ctx, testRun, PlanText, WithDigest(bytes.NewReader(text), digest)); err != nil {
			t.Fatal(err)
		}
		if got := names(); len(got) != 1 || got[0] != want {
			t.Fatalf("objects %v, want only %s", got, want)
		}
	}
	_, err := s.Put(ctx, testRun, PlanJSON, WithDigest(strings.NewReader(`{"forged":true}`), digest))
	if !errors.Is(err, ErrDigestMismatch) || len(names()) != 1 {
		t.Fatalf("a part that does not hash to its declared digest: %v, objects %v", err, names())
	}
	// The same text again, in an upload that fails after it: the object
	// the stored meta names stays.
	_, err = s.PutAll(ctx, testRun, func() func() (Kind, io.Reader, error) {
		n := 0
		return func() (Kind, io.Reader, error) {
			if n++; n == 1 {
				return PlanText, WithDigest(bytes.NewReader(text), digest), nil
			}
			return "", nil, errors.New("the client went away")
		}
	}())
	if err == nil {
		t.Fatal("a failed upload succeeded")
	}
	if got, _ := readAll(t, s, ctx, testRun, PlanText); !bytes.Equal(got, text) {
		t.Fatal("the stored text was lost with a failed upload of the same bytes")
	}
}

// TestLogMovedOnce: moves of one log at once (the queue's, the sweep's, a
// migration's) leave one object, and none of them fails.
func TestLogMovedOnce(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, _ := objectStore(t)
	s := New(cli, Options{Objects: objs, ChunkSize: 1024})
	if err := s.EndLog(ctx, testRun, "apply", 1, []byte(logLines(2000))); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := s.compactLog(ctx, logRef{testRun, "apply", 1})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("a move of a log moved at the same time: %v", err)
		}
	}
	n := 0
	if err := objs.List(ctx, objectPrefix(testRun), func(string, time.Time) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d objects of one log", n)
	}
	if got := streamAll(t, s, ctx, testRun, "apply", 1, LogOptions{}); got != logLines(2000) {
		t.Error("the log reads back otherwise")
	}
}

// TestLogEndedInOneWrite: with an object store, a log whose first write
// ends it (a short stage nobody followed) is one object from the start: one
// transaction, no chunk in etcd, nothing to move; a follower that waited
// for the log gets all of it, and reads by lines and bytes are served from
// the object. A log that had chunks before its end still moves when it
// closes, and the size limit cuts a log written in one go as it cuts
// chunks.
func TestLogEndedInOneWrite(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	objs, srv := objectStore(t)
	s := New(cli, Options{Objects: objs, ChunkSize: 4096, Limits: Limits{Log: 3000}})
	content := logLines(63) // 2,898 bytes: under the chunk size and the limit

	lk, err := s.logKeys(testRun, "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	before := etcdRevision(t, ctx, cli)
	if err := s.EndLog(ctx, testRun, "plan", 1, []byte(content)); err != nil {
		t.Fatal(err)
	}
	after := etcdRevision(t, ctx, cli)
	if after-before != 1 {
		t.Fatalf("the log cost %d transactions, want 1", after-before)
	}
	if n := len(keys(t, cli, lk.chunks)); n != 0 {
		t.Fatalf("%d chunks of the log in etcd, want none", n)
	}
	if got := srv.RunObjects(testRun.Namespace, testRun.Name, testRun.UID); got["log/plan/0000000001"] == "" {
		t.Fatalf("no object of the log in the bucket: %v", got)
	}
	if bucketHolds(t, srv, []byte("hunter2-secret-value")) {
		t.Fatal("the bucket holds the log in plain")
	}

	// A follower that waits for a log gets all of it when it ends in one
	// write.
	followed := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		err := s.StreamLog(ctx, testRun, "plan", 3, LogOptions{Follow: true}, &b)
		if err != nil {
			b.WriteString("follow failed: " + err.Error())
		}
		followed <- b.String()
	}()
	waited, err := s.logKeys(testRun, "plan", 3)
	if err != nil {
		t.Fatal(err)
	}
	for len(keys(t, cli, waited.followers)) == 0 {
		time.Sleep(10 * time.Millisecond) // until the follower waits
	}
	if err := s.EndLog(ctx, testRun, "plan", 3, []byte(content)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-followed:
		if got != content {
			t.Fatalf("the follower got %q, want the log's %d bytes", got, len(content))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end with the log")
	}
	lines := strings.SplitAfter(content, "\n")
	for _, c := range []struct {
		opts LogOptions
		want string
	}{
		{LogOptions{}, content},
		{LogOptions{TailLines: ptr[int64](2)}, strings.Join(lines[len(lines)-3:], "")},
		{LogOptions{LimitBytes: ptr[int64](100)}, content[:100]},
		{LogOptions{Follow: true}, content},
	} {
		var b bytes.Buffer
		if err := s.StreamLog(ctx, testRun, "plan", 1, c.opts, &b); err != nil {
			t.Fatalf("options %s: %v", describe(c.opts), err)
		}
		if b.String() != c.want {
			t.Fatalf("options %s: %q, want %q", describe(c.opts), b.String(), c.want)
		}
	}
	if err := s.AppendLog(ctx, testRun, "plan", 1, []byte("more")); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("appending to the ended log: %v, want ErrLogClosed", err)
	}

	// Cut at the limit, with the marker.
	long := logLines(80) // 3,680 bytes
	if err := s.EndLog(ctx, testRun, "apply", 1, []byte(long)); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := s.StreamLog(ctx, testRun, "apply", 1, LogOptions{}, &b); err != nil {
		t.Fatal(err)
	}
	if want := long[:3000] + string(marker(3000)); b.String() != want {
		t.Fatalf("the log over its limit reads %d bytes, want %d ending in the marker", b.Len(), len(want))
	}

	// A log with chunks before its end goes to chunks, and moves.
	go s.RunObjectMaintenance(ctx)
	if err := s.AppendLog(ctx, testRun, "plan", 2, []byte(content[:100])); err != nil {
		t.Fatal(err)
	}
	if err := s.EndLog(ctx, testRun, "plan", 2, []byte(content[100:])); err != nil {
		t.Fatal(err)
	}
	if m := waitMovedAttempt(t, ctx, s, "plan", 2); m.Size != int64(len(content)) {
		t.Fatalf("the moved log holds %d bytes, want %d", m.Size, len(content))
	}
}
