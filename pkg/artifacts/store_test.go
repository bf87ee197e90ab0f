package artifacts

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
)

var testRun = RunRef{Namespace: "team-a", Name: "network", UID: "4f1c9a6e-0000-4000-8000-000000000001"}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func readAll(t *testing.T, s *Store, ctx context.Context, run RunRef, kind Kind) ([]byte, Meta) {
	t.Helper()
	rc, m, err := s.Get(ctx, run, kind)
	if err != nil {
		t.Fatalf("Get %s: %v", kind, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", kind, err)
	}
	return b, m
}

func streamAll(t *testing.T, s *Store, ctx context.Context, run RunRef, stage string, attempt int32, opts LogOptions) string {
	t.Helper()
	var buf bytes.Buffer
	if err := s.StreamLog(ctx, run, stage, attempt, opts, &buf); err != nil {
		t.Fatalf("StreamLog: %v", err)
	}
	return buf.String()
}

// keys returns every key and value under prefix.
func keys(t *testing.T, cli *clientv3.Client, prefix string) map[string][]byte {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// etcdRevision is etcd's current revision: its growth counts transactions.
func etcdRevision(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, "revision")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestPlanFileRoundTrip20MiB(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{})
	data := randomBytes(t, 20<<20)

	m, err := s.Put(ctx, testRun, PlanFile, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := Meta{Size: int64(len(data)), SHA256: sum(data)}
	if m != want {
		t.Fatalf("Put meta = %+v, want %+v", m, want)
	}
	if st, err := s.Stat(ctx, testRun, PlanFile); err != nil || st != want {
		t.Fatalf("Stat = %+v, %v; want %+v", st, err, want)
	}
	got, gm := readAll(t, s, ctx, testRun, PlanFile)
	if gm != want || !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes (%s), meta %+v; want %d bytes (%s)", len(got), sum(got), gm, len(data), want.SHA256)
	}

	// 80 chunks of 256 KiB plus the meta, each well under etcd's request limit.
	kv := keys(t, cli, s.runBase(testRun)+string(PlanFile)+"/")
	if len(kv) != 81 {
		t.Errorf("%d keys for the plan file, want 80 chunks + meta", len(kv))
	}
	for k, v := range kv {
		if len(v) > defaultChunkSize {
			t.Errorf("value of %s is %d bytes", k, len(v))
		}
	}
}

func TestLogRoundTrip20MiB(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{})
	data := randomBytes(t, 20<<20)
	for p := data; len(p) > 0; {
		n := min(len(p), 3<<20+17) // not a multiple of the chunk size
		if err := s.AppendLog(ctx, testRun, "plan", 0, p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := s.CloseLog(ctx, testRun, "plan", 0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.StreamLog(ctx, testRun, "plan", 0, LogOptions{}, &buf); err != nil {
		t.Fatal(err)
	}
	if sum(buf.Bytes()) != sum(data) {
		t.Fatalf("log read back: %d bytes %s, want %d bytes %s", buf.Len(), sum(buf.Bytes()), len(data), sum(data))
	}
	// Following a closed log returns at once with the same content.
	buf.Reset()
	if err := s.StreamLog(ctx, testRun, "plan", 0, LogOptions{Follow: true}, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("follow of a closed log: %d bytes, %v", buf.Len(), err)
	}
	for k, v := range keys(t, cli, s.runBase(testRun)+"logs/") {
		if len(v) > defaultChunkSize {
			t.Errorf("value of %s is %d bytes", k, len(v))
		}
	}
}

// countingReader records how much was read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestTruncation(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 256, Limits: Limits{PlanText: 1000, Outputs: 1000, Log: 1000}})
	mark := fmt.Sprintf(TruncationMarker, 1000)

	t.Run("text", func(t *testing.T) {
		in := bytes.Repeat([]byte("0123456789"), 500)
		cr := &countingReader{r: bytes.NewReader(in)}
		m, err := s.Put(ctx, testRun, PlanText, cr)
		if err != nil {
			t.Fatal(err)
		}
		want := string(in[:1000]) + mark
		if !m.Truncated || m.Size != int64(len(want)) || m.SHA256 != sum([]byte(want)) {
			t.Fatalf("meta %+v, want truncated, size %d", m, len(want))
		}
		if cr.n != len(in) {
			t.Errorf("read %d bytes of the input, want all %d (drained)", cr.n, len(in))
		}
		got, _ := readAll(t, s, ctx, testRun, PlanText)
		if string(got) != want {
			t.Fatalf("content %q, want %q", got, want)
		}
		if !strings.Contains(mark, "1000 bytes") {
			t.Fatalf("marker %q does not state the limit", mark)
		}
	})

	t.Run("exactly at the limit", func(t *testing.T) {
		in := randomBytes(t, 1000)
		m, err := s.Put(ctx, testRun, Outputs, bytes.NewReader(in))
		if err != nil || m.Truncated || m.Size != 1000 {
			t.Fatalf("meta %+v, %v", m, err)
		}
		if got, _ := readAll(t, s, ctx, testRun, Outputs); !bytes.Equal(got, in) {
			t.Fatal("content differs")
		}
	})

	t.Run("log", func(t *testing.T) {
		var want strings.Builder
		for i := 0; i < 10; i++ {
			line := strings.Repeat(fmt.Sprintf("%d", i), 299) + "\n"
			want.WriteString(line)
			if err := s.AppendLog(ctx, testRun, "apply", 1, []byte(line)); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		if err := s.CloseLog(ctx, testRun, "apply", 1); err != nil {
			t.Fatal(err)
		}
		got := streamAll(t, s, ctx, testRun, "apply", 1, LogOptions{})
		if exp := want.String()[:1000] + mark; got != exp {
			t.Fatalf("log %q, want %q", got, exp)
		}
		if strings.Count(got, "truncated") != 1 {
			t.Fatal("marker written more than once")
		}
	})

	t.Run("log in one large append", func(t *testing.T) {
		if err := s.AppendLog(ctx, testRun, "apply", 2, bytes.Repeat([]byte("x"), 5000)); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendLog(ctx, testRun, "apply", 2, []byte("more")); err != nil {
			t.Fatal(err)
		}
		got := streamAll(t, s, ctx, testRun, "apply", 2, LogOptions{})
		if exp := strings.Repeat("x", 1000) + mark; got != exp {
			t.Fatalf("log %q, want %q", got, exp)
		}
	})
}

func TestPlanFileOverLimit(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 256, Limits: Limits{PlanFile: 1000}})

	old := randomBytes(t, 600)
	if _, err := s.Put(ctx, testRun, PlanFile, bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(ctx, testRun, PlanFile, bytes.NewReader(randomBytes(t, 1001)))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1000 bytes") || !strings.Contains(err.Error(), "raise") {
		t.Fatalf("Put of an oversized plan file: %v", err)
	}
	// The earlier plan file stays, and nothing of the failed one is left.
	if got, _ := readAll(t, s, ctx, testRun, PlanFile); !bytes.Equal(got, old) {
		t.Fatal("earlier plan file changed")
	}
	if kv := keys(t, cli, s.runBase(testRun)+string(PlanFile)+"/"); len(kv) != 4 { // meta + 3 chunks of the old one
		t.Fatalf("%d keys left, want 4", len(kv))
	}

	// Without an earlier one, nothing is stored.
	other := RunRef{Namespace: "team-a", Name: "other", UID: "u2"}
	if _, err := s.Put(ctx, other, PlanFile, bytes.NewReader(randomBytes(t, 5000))); !errors.Is(err, ErrTooLarge) {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, other, PlanFile); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat after failed Put: %v", err)
	}
	if kv := keys(t, cli, s.runBase(other)+string(PlanFile)+"/"); len(kv) != 0 {
		t.Fatalf("%d keys left", len(kv))
	}
}

func TestReplaceIsAtomic(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 1024})
	a, b := randomBytes(t, 10*1024+5), randomBytes(t, 3*1024)
	if _, err := s.Put(ctx, testRun, PlanJSON, bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	// A reader of the old artifact that has started keeps reading it.
	rc, _, err := s.Get(ctx, testRun, PlanJSON)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	head := make([]byte, 100)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}

	m, err := s.Put(ctx, testRun, PlanJSON, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got, gm := readAll(t, s, ctx, testRun, PlanJSON); !bytes.Equal(got, b) || gm != m {
		t.Fatal("replacement not visible")
	}
	// Only the meta and the new generation's chunks are left.
	kv := keys(t, cli, s.runBase(testRun)+string(PlanJSON)+"/")
	gens := map[string]bool{}
	for k := range kv {
		rest := strings.TrimPrefix(k, s.runBase(testRun)+string(PlanJSON)+"/")
		if rest != "meta" {
			gens[strings.Split(rest, "/")[0]] = true
		}
	}
	if len(kv) != 4 || len(gens) != 1 {
		t.Fatalf("keys after replacement: %d keys in %d generations, want meta + 3 chunks of 1 generation", len(kv), len(gens))
	}

	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading the replaced artifact: %v", err)
	}
	if !bytes.Equal(append(head, rest...), a) {
		t.Fatal("reader of the replaced artifact saw a mix")
	}
}

func TestEncryptionAtRest(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	const secret = "s3cr3t-DB-password-do-not-leak"
	plan := []byte(strings.Repeat(secret+"\n", 2000))

	block, err := aes.NewCipher(randomBytes(t, 32))
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := aestransformer.NewGCMTransformer(block)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		opts      Options
		plaintext bool
	}{
		{"aes-gcm", Options{Prefix: "/enc/", Transformer: gcm, ChunkSize: 4096}, false},
		{"identity", Options{Prefix: "/plain/", ChunkSize: 4096}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(cli, tc.opts)
			if _, err := s.Put(ctx, testRun, PlanFile, bytes.NewReader(plan)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(ctx, testRun, Outputs, strings.NewReader(`{"password":{"value":"`+secret+`"}}`)); err != nil {
				t.Fatal(err)
			}
			if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("echo "+secret+"\n")); err != nil {
				t.Fatal(err)
			}
			kv := keys(t, cli, tc.opts.Prefix)
			var withSecret, metas int
			for k, v := range kv {
				if bytes.Contains(v, []byte(secret)) {
					withSecret++
				}
				if strings.HasSuffix(k, "/meta") {
					metas++
					if got := bytes.Contains(v, []byte(`"size"`)); got != tc.plaintext {
						t.Errorf("meta %s readable in plain: %v", k, got)
					}
				}
			}
			if tc.plaintext && withSecret != 16+2 { // every plan chunk, outputs, log
				t.Errorf("%d values hold the plaintext, want 18 (of %d)", withSecret, len(kv))
			}
			if !tc.plaintext && withSecret != 0 {
				t.Errorf("%d values hold the plaintext", withSecret)
			}
			if metas != 3 {
				t.Errorf("%d metas", metas)
			}
			if got, _ := readAll(t, s, ctx, testRun, PlanFile); !bytes.Equal(got, plan) {
				t.Fatal("plan file differs after the round trip")
			}
			if got := streamAll(t, s, ctx, testRun, "plan", 0, LogOptions{}); got != "echo "+secret+"\n" {
				t.Fatalf("log %q", got)
			}
		})
	}

	// The key is authenticated data: a value copied to another key is rejected.
	s := New(cli, Options{Prefix: "/enc/", Transformer: gcm, ChunkSize: 4096})
	other := RunRef{Namespace: "team-b", Name: "thief", UID: "u3"}
	if _, err := s.Put(ctx, other, Outputs, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	src := keys(t, cli, s.runBase(testRun)+string(Outputs)+"/")
	dst := keys(t, cli, s.runBase(other)+string(Outputs)+"/")
	for k, v := range src {
		if strings.HasSuffix(k, "/meta") {
			continue
		}
		for dk := range dst {
			if !strings.HasSuffix(dk, "/meta") {
				if _, err := cli.Put(ctx, dk, string(v)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rc, _, err := s.Get(ctx, other, Outputs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "from storage") {
		t.Fatalf("a value moved to another key: %v, want a transformer error", err)
	}
}

func TestLeaseRetention(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)

	t.Run("default TTL and one shared lease", func(t *testing.T) {
		s1, s2 := New(cli, Options{Prefix: "/a/"}), New(cli, Options{Prefix: "/a/"})
		var wg sync.WaitGroup
		for i, s := range []*Store{s1, s2, s1, s2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Put(ctx, testRun, []Kind{PlanText, PlanJSON, Outputs, PlanSource}[i], strings.NewReader("x")); err != nil {
					t.Error(err)
				}
				if err := s.AppendLog(ctx, testRun, "plan", int32(i), []byte("x")); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		resp, err := cli.Get(ctx, "/a/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		leases := map[clientv3.LeaseID]int{}
		for _, kv := range resp.Kvs {
			leases[clientv3.LeaseID(kv.Lease)]++
		}
		if len(leases) != 1 || leases[0] != 0 {
			t.Fatalf("keys by lease: %v, want every key on one lease", leases)
		}
		for id := range leases {
			ttl, err := cli.TimeToLive(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if ttl.GrantedTTL != int64((720*time.Hour).Seconds()) || ttl.TTL <= 0 {
				t.Fatalf("lease TTL %d granted %d", ttl.TTL, ttl.GrantedTTL)
			}
		}
		// The losers of the race revoked their leases.
		ls, err := cli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls.Leases) != 1 {
			t.Fatalf("%d leases exist, want 1", len(ls.Leases))
		}
	})

	t.Run("keys expire", func(t *testing.T) {
		s := New(cli, Options{Prefix: "/short/", Retention: 2 * time.Second, ChunkSize: 100})
		if _, err := s.Put(ctx, testRun, PlanFile, bytes.NewReader(randomBytes(t, 1000))); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		if n := len(keys(t, cli, "/short/")); n != 15 { // plan meta + 10 chunks, log meta + chunk + index + usage
			t.Fatalf("%d keys, want 15", n)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(keys(t, cli, "/short/")) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("keys still there 10s after a 2s retention")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := s.Stat(ctx, testRun, PlanFile); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Stat after expiry: %v", err)
		}
		// Writing again (with a stale cached lease and log meta) creates a new lease.
		if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("again\n")); err != nil {
			t.Fatal(err)
		}
		if got := streamAll(t, s, ctx, testRun, "plan", 0, LogOptions{}); got != "again\n" {
			t.Fatalf("log after expiry %q", got)
		}
		if _, err := s.Put(ctx, testRun, Outputs, strings.NewReader("{}")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDeleteRun(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 100})
	for _, k := range []Kind{PlanFile, PlanText, PlanJSON, PlanSource, Outputs} {
		if _, err := s.Put(ctx, testRun, k, bytes.NewReader(randomBytes(t, 250))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("log\n")); err != nil {
		t.Fatal(err)
	}
	// A run re-created with the same name but a new UID sees nothing.
	recreated := testRun
	recreated.UID = "4f1c9a6e-0000-4000-8000-000000000002"
	for _, k := range []Kind{PlanFile, PlanText, PlanJSON, PlanSource, Outputs} {
		if _, _, err := s.Get(ctx, recreated, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get %s of the re-created run: %v", k, err)
		}
	}
	if err := s.StreamLog(ctx, recreated, "plan", 0, LogOptions{}, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("StreamLog of the re-created run: %v", err)
	}
	if _, err := s.Put(ctx, recreated, Outputs, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}

	// A run first written by an older server has its lease recorded under
	// its lease key, with an ID that etcd chose: DeleteRun revokes it too.
	older := testRun
	older.UID = "4f1c9a6e-0000-4000-8000-000000000003"
	grant, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, s.runBase(older)+"lease", strconv.FormatInt(int64(grant.ID), 16), clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, older, Outputs, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	for _, run := range []RunRef{testRun, older} {
		if err := s.DeleteRun(ctx, run); err != nil {
			t.Fatal(err)
		}
		if kv := keys(t, cli, s.runBase(run)); len(kv) != 0 {
			t.Fatalf("%d keys left after DeleteRun", len(kv))
		}
	}
	resp, err := cli.Get(ctx, s.runBase(recreated), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatal("the other run's keys were touched")
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Leases) != 1 || ls.Leases[0].ID != clientv3.LeaseID(resp.Kvs[0].Lease) {
		t.Fatalf("leases after DeleteRun: %v, want only the other run's", ls.Leases)
	}
	if _, err := s.Stat(ctx, testRun, PlanFile); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.DeleteRun(ctx, testRun); err != nil {
		t.Fatalf("second DeleteRun: %v", err)
	}
	// Writing after a delete works again, with a new lease.
	if _, err := s.Put(ctx, testRun, Outputs, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
}

func TestStreamLogTailAndLimit(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 8}) // lines span chunks
	var all strings.Builder
	for i := 1; i <= 20; i++ {
		line := fmt.Sprintf("line-%02d\n", i)
		all.WriteString(line)
	}
	content := all.String() + "partial" // no final newline
	for p := content; len(p) > 0; {
		n := min(len(p), 13)
		if err := s.AppendLog(ctx, testRun, "plan", 0, []byte(p[:n])); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := s.AppendLog(ctx, testRun, "apply", 0, []byte("a\nb\nc\n")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		stage string
		opts  LogOptions
		want  string
	}{
		{"all", "plan", LogOptions{}, content},
		{"tail 1", "plan", LogOptions{TailLines: ptr[int64](1)}, "partial"},
		{"tail 3", "plan", LogOptions{TailLines: ptr[int64](3)}, "line-19\nline-20\npartial"},
		{"tail 0", "plan", LogOptions{TailLines: ptr[int64](0)}, ""},
		{"tail more than there are", "plan", LogOptions{TailLines: ptr[int64](1000)}, content},
		{"tail 1 with final newline", "apply", LogOptions{TailLines: ptr[int64](1)}, "c\n"},
		{"tail 2 with final newline", "apply", LogOptions{TailLines: ptr[int64](2)}, "b\nc\n"},
		{"tail 3 with final newline", "apply", LogOptions{TailLines: ptr[int64](3)}, "a\nb\nc\n"},
		{"limit", "plan", LogOptions{LimitBytes: ptr[int64](5)}, "line-"},
		{"limit 0", "plan", LogOptions{LimitBytes: ptr[int64](0)}, ""},
		{"limit beyond", "plan", LogOptions{LimitBytes: ptr[int64](100000)}, content},
		{"tail and limit", "plan", LogOptions{TailLines: ptr[int64](2), LimitBytes: ptr[int64](10)}, "line-20\npa"},
		{"follow with limit returns", "plan", LogOptions{Follow: true, LimitBytes: ptr[int64](12)}, "line-01\nline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := streamAll(t, s, ctx, testRun, tc.stage, 0, tc.opts); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if err := s.StreamLog(ctx, testRun, "plan", 7, LogOptions{}, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing log: %v", err)
	}
}

func TestLogLifecycle(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{})
	for _, a := range []int32{2, 0, 10} {
		if err := s.AppendLog(ctx, testRun, "plan", a, []byte(fmt.Sprintf("attempt %d\n", a))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseLog(ctx, testRun, "apply", 3); err != nil { // never written
		t.Fatal(err)
	}
	if got := streamAll(t, s, ctx, testRun, "apply", 3, LogOptions{Follow: true}); got != "" {
		t.Fatalf("closed empty log: %q", got)
	}

	if err := s.CloseLog(ctx, testRun, "plan", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseLog(ctx, testRun, "plan", 2); err != nil {
		t.Fatalf("second CloseLog: %v", err)
	}
	if err := s.AppendLog(ctx, testRun, "plan", 2, []byte("late\n")); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("append to a closed log: %v", err)
	}
	// Another replica, with nothing cached, sees the close too.
	if err := New(cli, Options{}).AppendLog(ctx, testRun, "plan", 2, []byte("late\n")); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("append to a closed log from another store: %v", err)
	}
	if got := streamAll(t, s, ctx, testRun, "plan", 2, LogOptions{}); got != "attempt 2\n" {
		t.Fatalf("closed log: %q", got)
	}
	if err := s.AppendLog(ctx, testRun, "plan", -1, []byte("x")); err == nil {
		t.Fatal("negative attempt accepted")
	}
	if err := s.AppendLog(ctx, RunRef{Name: "x", UID: "y"}, "plan", 0, []byte("x")); err == nil {
		t.Fatal("run without namespace accepted")
	}
}

// timedWriter records when each line arrives and counts flushes.
type timedWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	arrived map[string]time.Time
	flushes int
	notify  chan struct{}
}

func newTimedWriter() *timedWriter {
	return &timedWriter{arrived: map[string]time.Time{}, notify: make(chan struct{}, 1)}
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if strings.HasSuffix(l, "\n") {
			w.arrived[l] = time.Now()
		}
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *timedWriter) Flush() {
	w.mu.Lock()
	w.flushes++
	w.mu.Unlock()
}

func (w *timedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestFollow(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	writer := New(cli, Options{})
	reader := New(newClient(t, cli.Endpoints()[0]), Options{}) // another replica

	w := newTimedWriter()
	done := make(chan error, 1)
	go func() { done <- reader.StreamLog(ctx, testRun, "plan", 0, LogOptions{Follow: true}, w) }()
	time.Sleep(200 * time.Millisecond) // the follower waits for a log that does not exist yet

	sent := map[string]time.Time{}
	var want strings.Builder
	for i := 0; i < 20; i++ {
		line := fmt.Sprintf("step %d: %s\n", i, strings.Repeat("x", i))
		sent[line] = time.Now()
		want.WriteString(line)
		if err := writer.AppendLog(ctx, testRun, "plan", 0, []byte(line)); err != nil {
			t.Fatal(err)
		}
		// Each line reaches the follower before the next is written.
		deadline := time.After(2 * time.Second)
		for {
			w.mu.Lock()
			_, ok := w.arrived[line]
			w.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-w.notify:
			case <-deadline:
				t.Fatalf("line %d not received within 2s", i)
			}
		}
	}
	select {
	case err := <-done:
		t.Fatalf("follower returned before the log was closed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	closed := time.Now()
	if err := writer.CloseLog(ctx, testRun, "plan", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("follower did not return within 2s of CloseLog")
	}
	var worst time.Duration
	for line, at := range sent {
		worst = max(worst, w.arrived[line].Sub(at))
	}
	t.Logf("slowest line took %v; follower returned %v after close", worst, time.Since(closed))
	if w.String() != want.String() {
		t.Fatalf("follower got %q, want %q", w.String(), want.String())
	}
	if w.flushes != 20 {
		t.Errorf("%d flushes, want one per chunk (20)", w.flushes)
	}

	// A follower that starts midway gets the existing content first, then the rest.
	t.Run("start midway with tail", func(t *testing.T) {
		if err := writer.AppendLog(ctx, testRun, "plan", 1, []byte("one\ntwo\nthree\n")); err != nil {
			t.Fatal(err)
		}
		w := newTimedWriter()
		done := make(chan error, 1)
		go func() {
			done <- reader.StreamLog(ctx, testRun, "plan", 1, LogOptions{Follow: true, TailLines: ptr[int64](1)}, w)
		}()
		for !strings.Contains(w.String(), "three") {
			select {
			case <-w.notify:
			case <-time.After(2 * time.Second):
				t.Fatal("tail not received")
			}
		}
		if err := writer.AppendLog(ctx, testRun, "plan", 1, []byte("four\n")); err != nil {
			t.Fatal(err)
		}
		if err := writer.CloseLog(ctx, testRun, "plan", 1); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if w.String() != "three\nfour\n" {
			t.Fatalf("got %q", w.String())
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- reader.StreamLog(cctx, testRun, "plan", 9, LogOptions{Follow: true}, io.Discard) }()
		time.Sleep(100 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled follower returned %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("cancelled follower did not return")
		}
	})

	t.Run("deleted while following", func(t *testing.T) {
		run := RunRef{Namespace: "team-a", Name: "doomed", UID: "u9"}
		if err := writer.AppendLog(ctx, run, "plan", 0, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- reader.StreamLog(ctx, run, "plan", 0, LogOptions{Follow: true}, io.Discard) }()
		time.Sleep(100 * time.Millisecond)
		if err := writer.DeleteRun(ctx, run); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("follower of a deleted log returned %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("follower of a deleted log did not return")
		}
	})
}

func TestManyFollowers(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 64 << 10})
	const followers = 10
	outs := make([]bytes.Buffer, followers)
	errs := make(chan error, followers)
	for i := range followers {
		go func() { errs <- s.StreamLog(ctx, testRun, "apply", 0, LogOptions{Follow: true}, &outs[i]) }()
	}
	var want bytes.Buffer
	for i := 0; i < 200; i++ {
		p := []byte(fmt.Sprintf("%04d %s\n", i, strings.Repeat("y", i*37)))
		want.Write(p)
		if err := s.AppendLog(ctx, testRun, "apply", 0, p); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := s.CloseLog(ctx, testRun, "apply", 0); err != nil {
		t.Fatal(err)
	}
	for range followers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a follower did not return")
		}
	}
	for i := range outs {
		if !bytes.Equal(outs[i].Bytes(), want.Bytes()) {
			t.Errorf("follower %d got %d bytes, want %d", i, outs[i].Len(), want.Len())
		}
	}
}

func TestConcurrentAppenders(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	stores := []*Store{New(cli, Options{}), New(newClient(t, cli.Endpoints()[0]), Options{})} // two replicas
	const goroutines, lines = 6, 60

	follower := &bytes.Buffer{}
	followed := make(chan error, 1)
	go func() {
		followed <- stores[1].StreamLog(ctx, testRun, "plan", 0, LogOptions{Follow: true}, follower)
	}()

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for i := range lines {
				if err := s.AppendLog(ctx, testRun, "plan", 0, []byte(fmt.Sprintf("g%d-%03d\n", g, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := stores[0].CloseLog(ctx, testRun, "plan", 0); err != nil {
		t.Fatal(err)
	}
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	got := streamAll(t, stores[0], ctx, testRun, "plan", 0, LogOptions{})
	if follower.String() != got {
		t.Fatal("the follower saw a different order than a reader")
	}
	seen := map[string]int{}
	last := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		seen[l]++
		var g, i int
		if _, err := fmt.Sscanf(l, "g%d-%d", &g, &i); err != nil {
			t.Fatalf("bad line %q", l)
		}
		key := fmt.Sprint(g)
		if prev, ok := last[key]; ok && i != prev+1 {
			t.Fatalf("goroutine %d: line %d after %d", g, i, prev)
		}
		last[key] = i
	}
	if len(seen) != goroutines*lines {
		t.Fatalf("%d distinct lines, want %d", len(seen), goroutines*lines)
	}
	for l, n := range seen {
		if n != 1 {
			t.Fatalf("line %q stored %d times", l, n)
		}
	}
}

func TestDeleteRunByAnotherReplica(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s1, s2 := New(cli, Options{}), New(newClient(t, cli.Endpoints()[0]), Options{})
	if err := s1.AppendLog(ctx, testRun, "plan", 0, []byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Put(ctx, testRun, PlanText, strings.NewReader("before")); err != nil {
		t.Fatal(err)
	}
	if err := s2.DeleteRun(ctx, testRun); err != nil {
		t.Fatal(err)
	}
	// s1 still caches the revoked lease and the old log meta.
	if _, err := s1.Put(ctx, testRun, PlanText, strings.NewReader("after")); err != nil {
		t.Fatalf("Put after a delete by another replica: %v", err)
	}
	if _, err := s1.Put(ctx, testRun, Outputs, strings.NewReader("")); err != nil {
		t.Fatalf("empty Put: %v", err)
	}
	if err := s1.AppendLog(ctx, testRun, "plan", 0, []byte("after\n")); err != nil {
		t.Fatalf("AppendLog after a delete by another replica: %v", err)
	}
	if got := streamAll(t, s2, ctx, testRun, "plan", 0, LogOptions{}); got != "after\n" {
		t.Fatalf("log %q", got)
	}
	if got, _ := readAll(t, s2, ctx, testRun, PlanText); string(got) != "after" {
		t.Fatalf("plan text %q", got)
	}
	if got, m := readAll(t, s2, ctx, testRun, Outputs); len(got) != 0 || m.Size != 0 || m.SHA256 != sum(nil) {
		t.Fatalf("empty outputs %q %+v", got, m)
	}
}

// TestFollowResumesAfterCompaction starts a follower at a revision that has
// been compacted, as happens when a watch breaks and etcd compacted meanwhile:
// it catches up with a read and goes on watching.
func TestFollowResumesAfterCompaction(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{})
	if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	seen := resp.Header.Revision
	for _, l := range []string{"b\n", "c\n"} {
		if err := s.AppendLog(ctx, testRun, "plan", 0, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, last.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	keys, err := s.logKeys(testRun, "plan", 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- s.follow(ctx, keys, 1, seen, &logSink{w: &buf, remaining: -1}) }()
	time.Sleep(300 * time.Millisecond)
	if err := s.AppendLog(ctx, testRun, "plan", 0, []byte("d\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseLog(ctx, testRun, "plan", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follower did not return")
	}
	if buf.String() != "b\nc\nd\n" {
		t.Fatalf("got %q", buf.String())
	}
}

// TestLogBudgets: the logs of a run, of a namespace and of all runs are
// capped together, each cut ending with a marker that says which budget, and
// the budget is freed when runs are deleted. Another store (another replica)
// sees what this one wrote.
func TestLogBudgets(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	opts := Options{Prefix: "/budget/", ChunkSize: 100, Limits: Limits{Log: 1000, RunLogs: 1500, NamespaceLogs: 2500, TotalLogs: 3500}}
	s := New(cli, opts)
	run := func(ns, name string) RunRef { return RunRef{Namespace: ns, Name: name, UID: name + "-uid"} }
	line := bytes.Repeat([]byte("x"), 99)
	line = append(line, '\n')
	write := func(r RunRef, stage string, n int) string {
		t.Helper()
		for range n / len(line) {
			if err := s.AppendLog(ctx, r, stage, 1, line); err != nil {
				t.Fatal(err)
			}
		}
		return streamAll(t, s, ctx, r, stage, 1, LogOptions{})
	}
	// One log: its own limit.
	a := run("team-a", "one")
	if got := write(a, "plan", 1200); !strings.HasSuffix(got, fmt.Sprintf(TruncationMarker, 1000)) || len(got) != 1000+len(fmt.Sprintf(TruncationMarker, 1000)) {
		t.Fatalf("plan log of %d bytes ends %q", len(got), got[max(len(got)-120, 0):])
	}
	// The run's second log: the run's budget (1500) leaves it about 500 bytes.
	got := write(a, "apply", 1000)
	if !strings.Contains(got, "the logs of this run reached their budget of 1500 bytes") || strings.Count(got, "x") > 500 {
		t.Fatalf("apply log: %d bytes, %q", len(got), got[max(len(got)-120, 0):])
	}
	// Another run of the namespace: the namespace's budget (2500).
	b := run("team-a", "two")
	got = write(b, "plan", 1000)
	if !strings.Contains(got, "the logs of namespace team-a reached their budget of 2500 bytes") {
		t.Fatalf("second run's log: %d bytes, %q", len(got), got[max(len(got)-160, 0):])
	}
	// Another namespace: the total (3500) binds before the namespace's.
	c := run("team-b", "three")
	got = write(c, "plan", 1000)
	if !strings.Contains(got, "the server's log storage budget of 3500 bytes is used up") {
		t.Fatalf("other namespace's log: %d bytes, %q", len(got), got[max(len(got)-160, 0):])
	}
	// A new replica sees the same use.
	replica := New(cli, opts)
	room, mark, err := replica.logBudget(ctx, run("team-c", "four"), 1000)
	if err != nil || room != 0 || !strings.Contains(string(mark), "server's log storage budget") {
		t.Fatalf("a new store's budget: %d, %q, %v; want 0 and the total's marker", room, mark, err)
	}
	// Deleting runs frees their part.
	for _, r := range []RunRef{a, b} {
		if err := s.DeleteRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	d := run("team-a", "five")
	if got := write(d, "plan", 500); strings.Contains(got, "truncated") || len(got) != 500 {
		t.Fatalf("after deleting runs, a new log of %d bytes: %q", len(got), got[max(len(got)-160, 0):])
	}
}

// TestPutTransactions: an artifact of n chunks costs n transactions, its last
// chunk committed with its meta; one of a single chunk, as most plan parts
// and every outputs document are, costs one.
func TestPutTransactions(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 1024})
	revision := func() int64 { return etcdRevision(t, ctx, cli) }
	// The run's lease is granted by the first Put.
	if _, err := s.Put(ctx, testRun, PlanText, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind Kind
		size int
		want int64
	}{{PlanJSON, 100, 1}, {PlanFile, 1024, 1}, {PlanSource, 3*1024 + 1, 4}, {Outputs, 0, 1}} {
		before := revision()
		data := randomBytes(t, tc.size)
		if _, err := s.Put(ctx, testRun, tc.kind, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if got := revision() - before; got != tc.want {
			t.Errorf("%s of %d bytes: %d transactions, want %d", tc.kind, tc.size, got, tc.want)
		}
		if got, _ := readAll(t, s, ctx, testRun, tc.kind); !bytes.Equal(got, data) {
			t.Errorf("%s of %d bytes reads back as %d bytes", tc.kind, tc.size, len(got))
		}
	}
}

// parts returns a PutAll iterator over kinds and their contents.
func parts(kinds []Kind, bodies [][]byte) func() (Kind, io.Reader, error) {
	i := 0
	return func() (Kind, io.Reader, error) {
		if i == len(kinds) {
			return "", nil, io.EOF
		}
		i++
		return kinds[i-1], bytes.NewReader(bodies[i-1]), nil
	}
}

// TestPutAll: several artifacts replaced in one transaction when their last
// chunks fit in it; longer parts and last chunks beyond maxCommitBytes are
// written ahead; a failure part-way replaces nothing and leaves no chunk.
func TestPutAll(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{ChunkSize: 1024})
	revision := func() int64 { return etcdRevision(t, ctx, cli) }
	// The run's lease is granted by the first Put.
	if _, err := s.Put(ctx, testRun, Outputs, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	kinds := []Kind{PlanSource, PlanFile, PlanText, PlanJSON}
	for _, tc := range []struct {
		name  string
		sizes []int
		want  int64
	}{
		{"one chunk each", []int{500, 1024, 10, 0}, 1},
		// Chunks written ahead: 3 of the source and 1 of the file; the
		// commit; and one transaction deletes the replaced generations.
		{"longer parts, replacing", []int{3*1024 + 1, 2 * 1024, 10, 1}, 3 + 1 + 1 + 1},
	} {
		bodies := make([][]byte, len(kinds))
		for i, n := range tc.sizes {
			bodies[i] = randomBytes(t, n)
		}
		before := revision()
		metas, err := s.PutAll(ctx, testRun, parts(kinds, bodies))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := revision() - before; got != tc.want {
			t.Errorf("%s: %d transactions, want %d", tc.name, got, tc.want)
		}
		for i, kind := range kinds {
			got, m := readAll(t, s, ctx, testRun, kind)
			if !bytes.Equal(got, bodies[i]) || m != metas[kind] || m.SHA256 != sum(bodies[i]) {
				t.Errorf("%s: %s reads back as %d bytes (meta %+v), want %d", tc.name, kind, len(got), m, len(bodies[i]))
			}
		}
	}

	// Last chunks beyond maxCommitBytes: the oldest are written ahead.
	big := New(cli, Options{ChunkSize: 512 << 10})
	bodies := [][]byte{randomBytes(t, 400<<10), randomBytes(t, 400<<10), randomBytes(t, 400<<10)}
	before := revision()
	if _, err := big.PutAll(ctx, testRun, parts(kinds[:3], bodies)); err != nil {
		t.Fatal(err)
	}
	if got := revision() - before; got != 3 {
		t.Errorf("three last chunks of 400 KiB, replacing: %d transactions, want 3 (one written ahead, the commit, the deletion of what they replace)", got)
	}
	for i, kind := range kinds[:3] {
		if got, _ := readAll(t, big, ctx, testRun, kind); !bytes.Equal(got, bodies[i]) {
			t.Errorf("%s of 400 KiB reads back as %d bytes", kind, len(got))
		}
	}

	// A part that cannot be read: nothing is replaced, no chunk is left.
	keep := map[Kind][]byte{}
	for _, kind := range kinds[:3] {
		keep[kind], _ = readAll(t, big, ctx, testRun, kind)
	}
	keysBefore := len(keys(t, cli, s.runBase(testRun)))
	failing := []io.Reader{bytes.NewReader(randomBytes(t, 3*1024)), bytes.NewReader(randomBytes(t, 3*1024)), io.MultiReader(bytes.NewReader(randomBytes(t, 2048)), iotest.ErrReader(errors.New("connection reset")))}
	i := 0
	_, err := s.PutAll(ctx, testRun, func() (Kind, io.Reader, error) {
		if i == len(failing) {
			return "", nil, io.EOF
		}
		i++
		return kinds[i-1], failing[i-1], nil
	})
	if err == nil || !strings.Contains(err.Error(), "connection reset") || !strings.Contains(err.Error(), string(PlanText)) {
		t.Fatalf("PutAll with a failing part: %v, want the read error naming %s", err, PlanText)
	}
	for kind, want := range keep {
		if got, _ := readAll(t, s, ctx, testRun, kind); !bytes.Equal(got, want) {
			t.Errorf("%s changed by a failed PutAll", kind)
		}
	}
	if n := len(keys(t, cli, s.runBase(testRun))); n != keysBefore {
		t.Errorf("%d keys after a failed PutAll, want the %d before it", n, keysBefore)
	}

	// A kind given twice.
	if _, err := s.PutAll(ctx, testRun, parts([]Kind{PlanText, PlanText}, [][]byte{[]byte("a"), []byte("b")})); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("PutAll with %s twice: %v, want an error", PlanText, err)
	}
}

// TestEndLog: the last bytes and the close of a log in one transaction; a
// follower ends with them; an empty end is a close; a log truncated on the
// way is closed too; nothing is appended after.
func TestEndLog(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	s := New(cli, Options{Limits: Limits{Log: 64}})
	revision := func() int64 { return etcdRevision(t, ctx, cli) }
	if err := s.AppendLog(ctx, testRun, "plan", 1, []byte("Planning...\n")); err != nil {
		t.Fatal(err)
	}
	followers, err := s.WatchLogFollowers(ctx, testRun, "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan string, 1)
	go func() { followed <- streamAll(t, s, ctx, testRun, "plan", 1, LogOptions{Follow: true}) }()
	<-followers.Arrived() // the follower's own key is written before EndLog is counted
	before := revision()
	if err := s.EndLog(ctx, testRun, "plan", 1, []byte("Plan: 1 to add.\n")); err != nil {
		t.Fatal(err)
	}
	if got := revision() - before; got != 1 {
		t.Errorf("EndLog: %d transactions, want 1", got)
	}
	select {
	case got := <-followed:
		if got != "Planning...\nPlan: 1 to add.\n" {
			t.Errorf("followed %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with EndLog")
	}
	if err := s.AppendLog(ctx, testRun, "plan", 1, []byte("late\n")); !errors.Is(err, ErrLogClosed) {
		t.Errorf("append after EndLog: %v, want ErrLogClosed", err)
	}
	if err := s.EndLog(ctx, testRun, "plan", 1, []byte("late\n")); !errors.Is(err, ErrLogClosed) {
		t.Errorf("EndLog after EndLog: %v, want ErrLogClosed", err)
	}

	for _, tc := range []struct {
		attempt int32
		last    []byte
		want    string
	}{
		{2, nil, "start\n"},
		{3, bytes.Repeat([]byte("x"), 100), "start\n" + strings.Repeat("x", 58) + fmt.Sprintf(TruncationMarker, 64)},
	} {
		if err := s.AppendLog(ctx, testRun, "plan", tc.attempt, []byte("start\n")); err != nil {
			t.Fatal(err)
		}
		if err := s.EndLog(ctx, testRun, "plan", tc.attempt, tc.last); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendLog(ctx, testRun, "plan", tc.attempt, []byte("late\n")); !errors.Is(err, ErrLogClosed) {
			t.Errorf("attempt %d: append after EndLog of %d bytes: %v, want ErrLogClosed", tc.attempt, len(tc.last), err)
		}
		if got := streamAll(t, s, ctx, testRun, "plan", tc.attempt, LogOptions{Follow: true}); got != tc.want {
			t.Errorf("attempt %d: %q, want %q", tc.attempt, got, tc.want)
		}
	}
}
