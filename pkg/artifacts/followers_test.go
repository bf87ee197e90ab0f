package artifacts

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitFollowed waits until f says the log is followed (want) or not.
func waitFollowed(t *testing.T, f *LogFollowers, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for f.Followed() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Followed() stayed %v for 30s", !want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogFollowersSeeFollowers: the writer of a log learns of every follower,
// on this store or on another replica's, when it arrives and when it leaves,
// and of no follower of another log.
func TestLogFollowersSeeFollowers(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	writer, replica := New(cli, Options{}), New(newClient(t, cli.Endpoints()[0]), Options{})
	if err := writer.AppendLog(ctx, testRun, "plan", 1, []byte("Planning...\n")); err != nil {
		t.Fatal(err)
	}
	f, err := writer.WatchLogFollowers(ctx, testRun, "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Followed() {
		t.Fatal("a log nobody follows counts as followed")
	}

	// Followers of other logs are not this log's.
	for _, other := range []struct {
		stage   string
		attempt int32
	}{{"plan", 2}, {"apply", 1}} {
		octx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- replica.StreamLog(octx, testRun, other.stage, other.attempt, LogOptions{Follow: true}, io.Discard)
		}()
		time.Sleep(200 * time.Millisecond)
		cancel()
		<-done
	}
	select {
	case <-f.Arrived():
		t.Fatal("a follower of another log arrived")
	default:
	}

	for _, s := range []*Store{writer, replica} {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.StreamLog(fctx, testRun, "plan", 1, LogOptions{Follow: true}, io.Discard) }()
		select {
		case <-f.Arrived():
		case <-time.After(30 * time.Second):
			t.Fatal("the follower's arrival was not seen")
		}
		if !f.Followed() {
			t.Error("a followed log does not count as followed")
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("follow: %v", err)
		}
		waitFollowed(t, f, false)
	}

	// A second watch, after the first's followers left, starts with none.
	f2, err := writer.WatchLogFollowers(ctx, testRun, "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	if f2.Followed() {
		t.Error("a log whose followers left counts as followed")
	}
}

// lostPutKV applies a put of a follower's key and then reports the put's
// context as ended, as a client whose context ends while the request is in
// flight does.
type lostPutKV struct{ clientv3.KV }

func (kv lostPutKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if !strings.Contains(key, "/log-followers/") {
		return kv.KV.Put(ctx, key, val, opts...)
	}
	if _, err := kv.KV.Put(ctx, key, val, opts...); err != nil {
		return nil, err
	}
	return nil, context.Canceled
}

// TestLogFollowerWhosePutWasLostLeaves: a follow whose key was written but
// whose put failed on the client leaves no key behind, so the log does not
// count as followed for as long as the store's lease lives.
func TestLogFollowerWhosePutWasLostLeaves(t *testing.T) {
	ctx := testContext(t)
	cli := startEtcd(t)
	writer := New(cli, Options{})
	if err := writer.AppendLog(ctx, testRun, "plan", 1, []byte("Planning...\n")); err != nil {
		t.Fatal(err)
	}
	f, err := writer.WatchLogFollowers(ctx, testRun, "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	lossy := newClient(t, cli.Endpoints()[0])
	lossy.KV = lostPutKV{lossy.KV}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- New(lossy, Options{}).StreamLog(fctx, testRun, "plan", 1, LogOptions{Follow: true}, io.Discard)
	}()
	select {
	case <-f.Arrived():
	case <-time.After(30 * time.Second):
		t.Fatal("the follower's arrival was not seen")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("follow: %v", err)
	}
	waitFollowed(t, f, false)
}
