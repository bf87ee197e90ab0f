package artifacts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/klog/v2"
)

// Followers of a log. A follower records itself under the log's followers
// prefix, on its store's session lease, for as long as it follows; the log's
// writer, on whichever replica it is, watches that prefix (LogFollowers) and
// so knows whether anyone waits for the next line. A writer can then collect
// a log that nobody follows into few transactions, and still hand a follower
// every line at once. The key of a follower whose replica died goes with the
// replica's lease.

// followerLeaseTTL is the TTL, in seconds, of a store's session lease, which
// its followers' keys are attached to.
const followerLeaseTTL = 15

// followerWriteTimeout bounds the removal of a follower's key after the
// follow's context has ended.
const followerWriteTimeout = 5 * time.Second

// session returns the store's session, granting its lease on first use and
// again after the lease was lost.
func (s *Store) session(ctx context.Context) (*concurrency.Session, error) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if s.sess != nil {
		select {
		case <-s.sess.Done():
			s.sess = nil
		default:
			return s.sess, nil
		}
	}
	// The lease is granted with the caller's context; the session keeps it
	// alive for as long as the client is open.
	grant, err := s.client.Grant(ctx, followerLeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("artifacts: granting the followers' lease: %w", err)
	}
	sess, err := concurrency.NewSession(s.client, concurrency.WithLease(grant.ID), concurrency.WithTTL(followerLeaseTTL))
	if err != nil {
		s.revokeQuietly(ctx, grant.ID)
		return nil, fmt.Errorf("artifacts: keeping the followers' lease alive: %w", err)
	}
	s.sess = sess
	return sess, nil
}

// dropSession forgets sess, whose lease etcd no longer has.
func (s *Store) dropSession(sess *concurrency.Session) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if s.sess == sess {
		s.sess = nil
		sess.Orphan()
	}
}

// registerFollower records a follower of the log until the returned function
// is called.
func (s *Store) registerFollower(ctx context.Context, keys logKeys) (func(), error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	key := keys.followers + hex.EncodeToString(id[:])
	for retried := false; ; retried = true {
		sess, err := s.session(ctx)
		if err != nil {
			return nil, err
		}
		_, err = s.client.Put(ctx, key, "", clientv3.WithLease(sess.Lease()))
		if isLeaseNotFound(err) && !retried {
			s.dropSession(sess)
			continue
		}
		unregister := func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followerWriteTimeout)
			defer cancel()
			if _, err := s.client.Delete(ctx, key); err != nil {
				klog.V(2).InfoS("Removing a follower's key; it goes with the lease", "key", key, "err", err)
			}
		}
		if err != nil {
			// A put that failed on the client (its context ended while the
			// request was in flight) may still have been applied: remove the
			// key, or the log would count as followed for as long as the
			// store's lease lives.
			unregister()
			return nil, fmt.Errorf("artifacts: recording a follower of the %s: %w", keys.what, err)
		}
		return unregister, nil
	}
}

// LogFollowers tells the writer of one log whether anyone follows it, as
// long as the context given to WatchLogFollowers lasts. When that cannot be
// known (etcd failed, the watch is being re-established), the log counts as
// followed: a writer then errs on the side of sending at once.
type LogFollowers struct {
	arrived chan struct{}

	mu        sync.Mutex
	followers map[string]struct{}
	unknown   bool
}

// Followed reports whether the log has a follower now, or may have one.
func (f *LogFollowers) Followed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unknown || len(f.followers) > 0
}

// Arrived receives a value when a follower arrives, or when followers can no
// longer be known.
func (f *LogFollowers) Arrived() <-chan struct{} { return f.arrived }

func (f *LogFollowers) signal() {
	select {
	case f.arrived <- struct{}{}:
	default:
	}
}

func (f *LogFollowers) setUnknown() {
	f.mu.Lock()
	f.unknown = true
	f.mu.Unlock()
	f.signal()
}

// reset replaces the known followers with those in kvs. It signals nothing:
// until now, the log counted as followed.
func (f *LogFollowers) reset(kvs []*mvccpb.KeyValue) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.followers = make(map[string]struct{}, len(kvs))
	for _, kv := range kvs {
		f.followers[string(kv.Key)] = struct{}{}
	}
	f.unknown = false
}

// apply applies the events of a watch.
func (f *LogFollowers) apply(events []*clientv3.Event) {
	arrived := false
	f.mu.Lock()
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if ev.Type == mvccpb.DELETE {
			delete(f.followers, key)
			continue
		}
		if _, ok := f.followers[key]; !ok {
			f.followers[key] = struct{}{}
			arrived = true
		}
	}
	f.mu.Unlock()
	if arrived {
		f.signal()
	}
}

// WatchLogFollowers watches who follows the log of the given stage attempt of
// run until ctx ends. It returns once the followers at the time of the call
// are known (or could not be read: then the log counts as followed until they
// are).
func (s *Store) WatchLogFollowers(ctx context.Context, run RunRef, stage string, attempt int32) (*LogFollowers, error) {
	keys, err := s.logKeys(run, stage, attempt)
	if err != nil {
		return nil, err
	}
	f := &LogFollowers{arrived: make(chan struct{}, 1), unknown: true}
	rev := s.readFollowers(ctx, keys, f)
	go s.watchFollowers(ctx, keys, f, rev)
	return f, nil
}

// readFollowers reads the followers of a log into f and returns the revision
// of the read, or 0 when it failed.
func (s *Store) readFollowers(ctx context.Context, keys logKeys, f *LogFollowers) int64 {
	resp, err := s.client.Get(ctx, keys.followers, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		if ctx.Err() == nil {
			klog.V(2).InfoS("Reading a log's followers; it counts as followed", "log", keys.what, "err", err)
		}
		f.setUnknown()
		return 0
	}
	f.reset(resp.Kvs)
	return resp.Header.Revision
}

func (s *Store) watchFollowers(ctx context.Context, keys logKeys, f *LogFollowers, rev int64) {
	for {
		if rev != 0 {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			wch := s.client.Watch(wctx, keys.followers, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			for wr := range wch {
				if err := wr.Err(); err != nil {
					if !errors.Is(err, context.Canceled) {
						klog.V(2).InfoS("Watching a log's followers; watching again", "log", keys.what, "err", err)
					}
					break
				}
				f.apply(wr.Events)
			}
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (compaction, leader loss): until the followers are
		// read again, the log counts as followed.
		f.setUnknown()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		rev = s.readFollowers(ctx, keys, f)
	}
}
