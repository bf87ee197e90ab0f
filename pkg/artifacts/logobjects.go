package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/metrics"
)

// With an object store, a log lives in etcd while its stage writes it, where
// followers read it as before, and moves into one object once it is closed:
// compactLog writes the object, then swaps the log's meta to name it and
// deletes the chunks and the usage key in one transaction. A finished log is
// then read from its object, with range reads for tailLines and limitBytes;
// a read that was under way when the chunks went goes on from the object at
// the offset it reached. A log whose first write ends it never has chunks:
// endLogInObject writes it as its object at once.

// chunksGoneError is the error of a read whose log chunks are gone: deleted
// with the run, or moved into the object store, which the reader checks.
type chunksGoneError struct{}

func (chunksGoneError) Error() string { return ErrNotFound.Error() }
func (chunksGoneError) Unwrap() error { return ErrNotFound }

var errChunksGone error = chunksGoneError{}

// logRef names one stage attempt's log.
type logRef struct {
	run     RunRef
	stage   string
	attempt int32
}

// logObjectName is the name of a new object for the log of ref.
func logObjectName(ref logRef, gen string) string {
	return fmt.Sprintf("%slog/%s/%010d/%s", objectPrefix(ref.run), url.PathEscape(ref.stage), ref.attempt, gen)
}

// logSweepInterval is how often a store looks for closed logs still in
// etcd, which a compaction that failed or a server that stopped left.
const logSweepInterval = time.Minute

// compactions holds the logs to move into the object store, in the order
// they closed.
type compactions struct {
	queue chan logRef
	// seen are the closed logs still in etcd at the last sweep: the next
	// sweep moves those it finds again, and leaves the ones a closing
	// store is moving.
	mu   sync.Mutex
	seen map[string]bool
}

// compactSoon asks for the closed log of ref to be moved into the object
// store; RunObjectMaintenance does it. A full queue drops the request: the
// sweep finds the log.
func (s *Store) compactSoon(ref logRef) {
	if s.objects == nil {
		return
	}
	select {
	case s.compact.queue <- ref:
	default:
	}
}

// RunObjectMaintenance keeps the object store in order until ctx ends: it
// moves closed logs into it, each as it closes and every minute those still
// in etcd (a server stopped before it moved them, or the object store was
// down), and every hour deletes the objects of runs that have no key in
// etcd any more (SweepOrphans). Without an object store it returns at once.
func (s *Store) RunObjectMaintenance(ctx context.Context) {
	if s.objects == nil {
		return
	}
	go wait.UntilWithContext(ctx, s.sweepClosedLogs, logSweepInterval)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n, err := s.SweepOrphans(ctx, orphanGrace); err != nil {
			klog.FromContext(ctx).Error(err, "Deleting the objects of runs gone from etcd; trying again in an hour", "deleted", n)
		} else if n > 0 {
			klog.FromContext(ctx).Info("Deleted the objects of runs gone from etcd", "objects", n)
		}
	}, orphanSweepInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case ref := <-s.compact.queue:
			if _, err := s.compactLog(ctx, ref); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Moving a finished log into the object store; it stays in etcd and is moved later", "run", ref.run.String(), "stage", ref.stage, "attempt", ref.attempt)
			}
		}
	}
}

// sweepClosedLogs moves the closed logs that the last sweep found in etcd
// too.
func (s *Store) sweepClosedLogs(ctx context.Context) {
	closed, err := s.closedLogsInEtcd(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing the finished logs still in etcd, to move them into the object store")
		return
	}
	s.compact.mu.Lock()
	last := s.compact.seen
	s.compact.seen = make(map[string]bool, len(closed))
	for _, ref := range closed {
		s.compact.seen[s.usageKey(ref.run, ref.stage, ref.attempt)] = true
	}
	s.compact.mu.Unlock()
	for _, ref := range closed {
		if !last[s.usageKey(ref.run, ref.stage, ref.attempt)] {
			continue
		}
		if _, err := s.compactLog(ctx, ref); err != nil {
			klog.FromContext(ctx).Error(err, "Moving a finished log into the object store; trying again at the next sweep", "run", ref.run.String(), "stage", ref.stage, "attempt", ref.attempt)
		}
	}
}

// parseUsageKey is the log whose usage key ends in rest
// (<namespace>/<name>/<uid>/<stage>/<attempt>).
func parseUsageKey(rest string) (logRef, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 5 {
		return logRef{}, false
	}
	for i, p := range parts[:4] {
		u, err := url.PathUnescape(p)
		if err != nil || u == "" {
			return logRef{}, false
		}
		parts[i] = u
	}
	var attempt int32
	if _, err := fmt.Sscanf(parts[4], "%d", &attempt); err != nil || attempt < 0 {
		return logRef{}, false
	}
	return logRef{run: RunRef{Namespace: parts[0], Name: parts[1], UID: parts[2]}, stage: parts[3], attempt: attempt}, true
}

// endLogInObject stores p, the whole log of ref and at most a chunk, as one
// object and the log's meta, closed, naming it, when the log does not exist
// yet: a stage whose log ends in its first batch (a short stage nobody
// followed, whose lines the server held until it ended) then costs one
// transaction, and its bytes never pass through etcd. The object is written
// first and the meta second, as every upload does (settleLogObject). It
// returns false, having stored nothing, when the log exists: p then goes to
// its chunks, and the log moves when it closes. The log's size limit
// applies as to chunks; the log budgets, which keep etcd from filling, do
// not, as for a moved log.
func (s *Store) endLogInObject(ctx context.Context, ref logRef, keys logKeys, p []byte) (bool, error) {
	cur, err := s.currentLogMeta(ctx, keys)
	if err != nil || cur.modRev != 0 {
		return false, err
	}
	data, truncated := p, false
	if limit := s.limits.Log; int64(len(p)) > limit {
		data, truncated = append(p[:limit:limit], marker(limit)...), true
	}
	gen, err := newGeneration()
	if err != nil {
		return false, err
	}
	name := logObjectName(ref, gen)
	release, err := s.uploads.acquire(ctx, ref.run.UID)
	if err != nil {
		return false, err
	}
	err = s.objects.Put(ctx, name, bytes.NewReader(data))
	release()
	if err != nil {
		s.deleteObjects(ctx, []string{name})
		return false, fmt.Errorf("artifacts: writing %s into the object store: %w", keys.what, err)
	}
	h := sha256.New()
	h.Write(data)
	stored := false
	_, err = s.updateLog(ctx, s.runBase(ref.run), keys, func(now logMeta, _ clientv3.LeaseID) (logMeta, []clientv3.Op, bool, error) {
		if now != (logMeta{}) {
			stored = false // another writer of the log came first
			return now, nil, true, nil
		}
		stored = true
		return logMeta{Size: int64(len(data)), Truncated: truncated, Closed: true, Object: name, SHA256: hashString(h)}, nil, false, nil
	})
	if ok, err := s.settleLogObject(ctx, name, stored, err); !ok {
		return false, err
	}
	s.cacheLogMeta(keys.meta, nil)
	metrics.LogBytes.WithLabelValues(ref.run.Namespace).Add(float64(len(data)))
	return true, nil
}

// settleLogObject decides the fate of a log's object, written before the
// meta write that was to name it: named says whether the meta's
// transaction wrote the name, err is that write's error. After an error the
// meta may name the object all the same (an etcd timeout after the commit,
// a log's chunks then gone), so the object stays, and goes with its run if
// nothing names it; an object whose meta went to another writer is
// deleted. It says whether the meta names the object.
func (s *Store) settleLogObject(ctx context.Context, name string, named bool, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	if !named {
		s.deleteObjects(ctx, []string{name})
	}
	return named, nil
}

// compactLog moves the closed log of ref into one object, and says whether
// it did (not when another move or the run's deletion came first): the
// object is written first, then the meta names it and the chunks go, in one
// transaction that holds only if the log is as it was read. An object that
// does not make it into the meta is deleted.
func (s *Store) compactLog(ctx context.Context, ref logRef) (bool, error) {
	keys, err := s.logKeys(ref.run, ref.stage, ref.attempt)
	if err != nil {
		return false, err
	}
	// One move of the run's at a time: a second one of the same log (the
	// sweep's, a migration's) then finds it moved.
	release, err := s.uploads.acquire(ctx, ref.run.UID)
	if err != nil {
		return false, err
	}
	defer release()
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return false, fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
	}
	cur, err := s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
	if err != nil || cur.modRev == 0 || !cur.meta.Closed || cur.meta.Object != "" {
		return false, err
	}
	gen, err := newGeneration()
	if err != nil {
		return false, err
	}
	name := logObjectName(ref, gen)
	h := sha256.New()
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		err := s.copyChunks(ctx, keys, cur.meta, 0, 0, cur.meta.Chunks, &logSink{w: io.MultiWriter(h, pw), remaining: -1})
		pw.CloseWithError(err)
		copied <- err
	}()
	err = s.objects.Put(ctx, name, pr)
	pr.CloseWithError(errors.New("the object store stopped reading"))
	if cerr := <-copied; cerr != nil {
		err = cerr // why the copy stopped, whatever the store said of it
	}
	if err != nil {
		s.deleteObjects(ctx, []string{name})
		if errors.Is(err, ErrNotFound) {
			return false, nil // moved by another store, or deleted with its run
		}
		return false, fmt.Errorf("artifacts: moving %s into the object store: %w", keys.what, err)
	}
	digest := hashString(h)
	moved := false
	_, err = s.updateLog(ctx, s.runBase(ref.run), keys, func(now logMeta, _ clientv3.LeaseID) (logMeta, []clientv3.Op, bool, error) {
		if now != cur.meta {
			moved = false
			return now, nil, true, nil // moved by another store, or deleted
		}
		moved = true
		next := now
		next.Object, next.SHA256 = name, digest
		return next, []clientv3.Op{
			clientv3.OpDelete(keys.chunks, clientv3.WithPrefix()),
			clientv3.OpDelete(s.usageKey(ref.run, ref.stage, ref.attempt)),
		}, false, nil
	})
	if ok, err := s.settleLogObject(ctx, name, moved, err); !ok {
		return false, err
	}
	s.cacheLogMeta(keys.meta, nil)
	s.countLog(ref.run, -cur.meta.Size)
	return true, nil
}

// streamLogObject writes the log in m's object: its last tailLines lines
// (all when nil), up to the sink's limit.
func (s *Store) streamLogObject(ctx context.Context, keys logKeys, m logMeta, tailLines *int64, sink *logSink) error {
	from := int64(0)
	if tailLines != nil {
		var err error
		if from, err = s.objectTailStart(ctx, keys, m, *tailLines); err != nil {
			return err
		}
	}
	return s.copyObject(ctx, keys, m, from, sink)
}

// objectTailBlock is how much of a log object one read fetches when looking
// for the start of its last lines.
const objectTailBlock = 64 << 10

// objectTailStart finds the offset where the last n lines of the log in m's
// object start, reading it backwards a block at a time.
func (s *Store) objectTailStart(ctx context.Context, keys logKeys, m logMeta, n int64) (int64, error) {
	if n == 0 {
		return m.Size, nil
	}
	if s.objects == nil {
		return 0, fmt.Errorf("artifacts: the %s is in the object store (object %s), and this server has none configured (--artifact-store)", keys.what, m.Object)
	}
	last := true
	buf := make([]byte, objectTailBlock)
	for end := m.Size; end > 0; {
		start := max(end-objectTailBlock, 0)
		rc, _, err := s.objects.Get(ctx, m.Object, start, end-start)
		if err != nil {
			return 0, fmt.Errorf("artifacts: reading %s from the object store: %w", keys.what, err)
		}
		data := buf[:end-start]
		_, err = io.ReadFull(rc, data)
		rc.Close()
		if err != nil {
			return 0, fmt.Errorf("artifacts: reading %s from the object store: %w", keys.what, err)
		}
		if j := lastLinesStart(data, &n, &last); j >= 0 {
			return start + int64(j), nil
		}
		end = start
	}
	return 0, nil
}

// copyObject writes the log in m's object from offset from, up to the
// sink's limit, reading only that range. A read of the whole log checks its
// digest.
func (s *Store) copyObject(ctx context.Context, keys logKeys, m logMeta, from int64, sink *logSink) error {
	if s.objects == nil {
		return fmt.Errorf("artifacts: the %s is in the object store (object %s), and this server has none configured (--artifact-store)", keys.what, m.Object)
	}
	n := int64(-1)
	if sink.remaining >= 0 {
		n = sink.remaining
	}
	if from >= m.Size || n == 0 {
		return nil
	}
	rc, _, err := s.objects.Get(ctx, m.Object, from, n)
	if err != nil {
		return fmt.Errorf("artifacts: reading %s from the object store: %w", keys.what, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if from == 0 && (n < 0 || n >= m.Size) {
		r = &verifiedObject{rc: rc, what: keys.what, meta: artifactMeta{Object: m.Object, Size: m.Size, SHA256: m.SHA256}, h: sha256.New()}
	}
	sink.pos = from
	buf := make([]byte, 32<<10)
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			if err := sink.write(buf[:k]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("artifacts: reading %s from the object store: %w", keys.what, rerr)
		}
	}
}

// resumeFromObject goes on with a read whose log chunks went (gone, the
// error that said so) from the log's object, at the offset the read reached.
// A log that has no object was deleted: gone is the answer.
func (s *Store) resumeFromObject(ctx context.Context, keys logKeys, gone error, sink *logSink) error {
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
	}
	cur, err := s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
	if err != nil {
		return err
	}
	if cur.meta.Object == "" {
		return gone
	}
	return s.copyObject(ctx, keys, cur.meta, sink.pos, sink)
}
