package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/metrics"
)

// logMeta is the stored meta of one log.
type logMeta struct {
	Chunks    int64 `json:"chunks"` // number of chunks; the next chunk's sequence number
	Size      int64 `json:"size"`   // bytes stored, including the truncation marker
	Truncated bool  `json:"truncated,omitempty"`
	Closed    bool  `json:"closed,omitempty"`
	// Object names the object that holds the closed log in the object
	// store, once its chunks were moved there (logobjects.go); SHA256 is
	// the digest of its bytes.
	Object string `json:"object,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// cachedLogMeta is a log meta with the ModRevision of its key; modRev 0 means
// the key does not exist.
type cachedLogMeta struct {
	meta   logMeta
	modRev int64
}

type logKeys struct {
	what   string // for messages
	dir    string // <run>logs/<stage>/<attempt>/: everything a follower watches
	meta   string
	chunks string // prefix of the chunk keys
	index  string
	// followers is the prefix of its followers' keys (followers.go), out of
	// dir: a follower's own key does not wake the followers.
	followers string
}

func (k logKeys) chunk(seq int64) string { return fmt.Sprintf("%s%016d", k.chunks, seq) }

func (k logKeys) parseChunk(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, k.chunks)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseInt(rest, 10, 64)
	return seq, err == nil
}

func (s *Store) logKeys(run RunRef, stage string, attempt int32) (logKeys, error) {
	if err := run.validate(); err != nil {
		return logKeys{}, err
	}
	if stage == "" {
		return logKeys{}, errors.New("artifacts: a log needs a stage")
	}
	if attempt < 0 {
		return logKeys{}, fmt.Errorf("artifacts: invalid attempt %d", attempt)
	}
	base := s.runBase(run)
	st := url.PathEscape(stage)
	dir := fmt.Sprintf("%slogs/%s/%010d/", base, st, attempt)
	return logKeys{
		what:      fmt.Sprintf("log of stage %q attempt %d of run %s", stage, attempt, run),
		dir:       dir,
		meta:      dir + "meta",
		chunks:    dir + "c/",
		index:     fmt.Sprintf("%slog-index/%s/%010d", base, st, attempt),
		followers: fmt.Sprintf("%slog-followers/%s/%010d/", base, st, attempt),
	}, nil
}

func (s *Store) decodeLogMeta(ctx context.Context, key string, kvs []*mvccpb.KeyValue) (cachedLogMeta, error) {
	if len(kvs) == 0 {
		return cachedLogMeta{}, nil
	}
	raw, err := s.unseal(ctx, key, kvs[0].Value)
	if err != nil {
		return cachedLogMeta{}, err
	}
	var m logMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return cachedLogMeta{}, fmt.Errorf("artifacts: decoding %s: %w", key, err)
	}
	return cachedLogMeta{meta: m, modRev: kvs[0].ModRevision}, nil
}

// currentLogMeta returns the cached meta of a log, or reads it. A stale cache
// entry only costs a failed compare-and-swap, which returns the current meta.
func (s *Store) currentLogMeta(ctx context.Context, keys logKeys) (cachedLogMeta, error) {
	s.mu.Lock()
	c, ok := s.logMetas[keys.meta]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return cachedLogMeta{}, fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
	}
	return s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
}

func (s *Store) cacheLogMeta(key string, c *cachedLogMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == nil {
		delete(s.logMetas, key)
		return
	}
	if len(s.logMetas) >= cacheMaxEntries {
		clear(s.logMetas)
	}
	s.logMetas[key] = *c
}

// updateLog applies change to the meta of a log with a compare-and-swap
// transaction on the meta key, retrying with the current meta when another
// writer got there first. change returns the new meta and the extra
// operations of the transaction, or done=true to stop without writing.
func (s *Store) updateLog(ctx context.Context, base string, keys logKeys, change func(cur logMeta, lease clientv3.LeaseID) (next logMeta, ops []clientv3.Op, done bool, err error)) (logMeta, error) {
	cur, err := s.currentLogMeta(ctx, keys)
	if err != nil {
		return logMeta{}, err
	}
	leaseRetries := 0
	for {
		if err := ctx.Err(); err != nil {
			return logMeta{}, err
		}
		leaseID, err := s.lease(ctx, base)
		if err != nil {
			return logMeta{}, err
		}
		next, ops, done, err := change(cur.meta, leaseID)
		if err != nil || done {
			return cur.meta, err
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return logMeta{}, err
		}
		sealed, err := s.seal(ctx, keys.meta, raw)
		if err != nil {
			return logMeta{}, err
		}
		ops = append(ops, clientv3.OpPut(keys.meta, sealed, clientv3.WithLease(leaseID)))
		if cur.modRev == 0 {
			ops = append(ops, clientv3.OpPut(keys.index, "", clientv3.WithLease(leaseID)))
		}
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(keys.meta), "=", cur.modRev)).
			Then(ops...).
			Else(clientv3.OpGet(keys.meta)).
			Commit()
		if err != nil {
			s.cacheLogMeta(keys.meta, nil)
			if isLeaseNotFound(err) && leaseRetries < 3 {
				// The run's lease expired or the run was deleted: start over
				// with a new lease.
				leaseRetries++
				s.forgetLease(base, leaseID)
				if cur, err = s.currentLogMeta(ctx, keys); err != nil {
					return logMeta{}, err
				}
				continue
			}
			return logMeta{}, fmt.Errorf("artifacts: writing %s: %w", keys.what, err)
		}
		if resp.Succeeded {
			s.cacheLogMeta(keys.meta, &cachedLogMeta{meta: next, modRev: resp.Header.Revision})
			return next, nil
		}
		if cur, err = s.decodeLogMeta(ctx, keys.meta, resp.Responses[0].GetResponseRange().GetKvs()); err != nil {
			return logMeta{}, err
		}
	}
}

// AppendLog appends p to the log of the given stage attempt of run, creating
// the log if needed. p is split into chunks of at most Options.ChunkSize; each
// chunk is added with a compare-and-swap transaction on the log's meta key, so
// concurrent appenders (also on other server replicas) are safe and every
// chunk is stored exactly once, in commit order. Chunks of concurrent calls
// may interleave when p is larger than one chunk.
//
// When the log reaches Limits.Log, the content up to the limit is kept,
// TruncationMarker is written once, and everything after is dropped; AppendLog
// still returns nil, so that a noisy stage does not fail because of its log.
// Appending to a closed log returns an error wrapping ErrLogClosed. An empty p
// is a no-op.
func (s *Store) AppendLog(ctx context.Context, run RunRef, stage string, attempt int32, p []byte) error {
	return s.appendLog(ctx, run, stage, attempt, p, false)
}

// EndLog appends p, the last bytes of the log of the given stage attempt of
// run, as AppendLog does, and closes the log as CloseLog does, in the
// transaction of p's last chunk: a stage's writer that has finished costs no
// transaction of its own to close its log.
func (s *Store) EndLog(ctx context.Context, run RunRef, stage string, attempt int32, p []byte) error {
	return s.appendLog(ctx, run, stage, attempt, p, true)
}

func (s *Store) appendLog(ctx context.Context, run RunRef, stage string, attempt int32, p []byte, end bool) error {
	if end && len(p) == 0 {
		return s.CloseLog(ctx, run, stage, attempt)
	}
	keys, err := s.logKeys(run, stage, attempt)
	if err != nil {
		return err
	}
	if end && s.objects != nil && len(p) <= s.chunkSize {
		if stored, err := s.endLogInObject(ctx, logRef{run, stage, attempt}, keys, p); stored || err != nil {
			return err
		}
	}
	base := s.runBase(run)
	limit := s.limits.Log
	usageKey := s.usageKey(run, stage, attempt)
	for len(p) > 0 {
		piece := p[:min(len(p), s.chunkSize)]
		p = p[len(piece):]
		budget, budgetMarker, err := s.logBudget(ctx, run, int64(len(piece)))
		if err != nil {
			return err
		}
		var stored int64
		m, err := s.updateLog(ctx, base, keys, func(cur logMeta, lease clientv3.LeaseID) (logMeta, []clientv3.Op, bool, error) {
			if cur.Closed {
				return cur, nil, true, fmt.Errorf("%w: %s", ErrLogClosed, keys.what)
			}
			if cur.Truncated {
				return cur, nil, true, nil
			}
			data := piece
			next := cur
			room, mark := max(limit-cur.Size, 0), marker(limit)
			if budgetMarker != nil && budget < room {
				room, mark = budget, budgetMarker
			}
			if int64(len(piece)) > room {
				data = append(piece[:room:room], mark...)
				next.Truncated = true
			}
			key := keys.chunk(cur.Chunks)
			sealed, err := s.seal(ctx, key, data)
			if err != nil {
				return cur, nil, true, err
			}
			next.Chunks++
			next.Size += int64(len(data))
			next.Closed = end && (len(p) == 0 || next.Truncated)
			stored = int64(len(data))
			return next, []clientv3.Op{
				clientv3.OpPut(key, sealed, clientv3.WithLease(lease)),
				clientv3.OpPut(usageKey, strconv.FormatInt(next.Size, 10), clientv3.WithLease(lease)),
			}, false, nil
		})
		if err != nil {
			return err
		}
		s.countLog(run, stored)
		metrics.LogBytes.WithLabelValues(run.Namespace).Add(float64(stored))
		if m.Closed {
			s.cacheLogMeta(keys.meta, nil)
			s.compactSoon(logRef{run, stage, attempt})
		}
		if m.Truncated {
			if end && !m.Closed {
				return s.CloseLog(ctx, run, stage, attempt)
			}
			return nil
		}
	}
	return nil
}

// CloseLog closes the log of the given stage attempt of run: further appends
// fail with ErrLogClosed and followers return once they have written all of it.
// Closing a log that does not exist creates it empty and closed, so that
// followers waiting for it return. CloseLog is idempotent; a closed log stays
// readable.
func (s *Store) CloseLog(ctx context.Context, run RunRef, stage string, attempt int32) error {
	keys, err := s.logKeys(run, stage, attempt)
	if err != nil {
		return err
	}
	_, err = s.updateLog(ctx, s.runBase(run), keys, func(cur logMeta, _ clientv3.LeaseID) (logMeta, []clientv3.Op, bool, error) {
		if cur.Closed {
			return cur, nil, true, nil
		}
		cur.Closed = true
		return cur, nil, false, nil
	})
	s.cacheLogMeta(keys.meta, nil)
	if err == nil {
		s.compactSoon(logRef{run, stage, attempt})
	}
	return err
}

// LogOptions selects what StreamLog writes.
type LogOptions struct {
	// Follow streams new chunks after the existing content until the log is
	// closed or the context ends. Without a log yet, StreamLog waits for it.
	Follow bool
	// TailLines, if set, starts with the last N lines of the content that
	// exists when StreamLog starts.
	TailLines *int64
	// LimitBytes, if set, stops after N bytes.
	LimitBytes *int64
}

var errLimitReached = errors.New("limit reached")

// logSink writes to the caller's writer, enforcing LimitBytes and flushing
// after every chunk.
type logSink struct {
	w         io.Writer
	remaining int64 // < 0: unlimited
	// pos is the offset in the log of the byte after the last one written,
	// where a read that lost the log's chunks to their object goes on.
	pos int64
}

func (k *logSink) write(p []byte) error {
	if k.remaining == 0 {
		return errLimitReached
	}
	if len(p) == 0 {
		return nil
	}
	limited := false
	if k.remaining > 0 && int64(len(p)) >= k.remaining {
		p, limited = p[:k.remaining], true
	}
	if _, err := k.w.Write(p); err != nil {
		return err
	}
	k.pos += int64(len(p))
	if k.remaining > 0 {
		k.remaining -= int64(len(p))
	}
	switch f := k.w.(type) {
	case interface{ Flush() }:
		f.Flush()
	case interface{ Flush() error }:
		if err := f.Flush(); err != nil {
			return err
		}
	}
	if limited {
		return errLimitReached
	}
	return nil
}

// StreamLog writes the log of the given stage attempt of run to w, flushing
// after every chunk if w has a Flush method (such as http.Flusher). It returns
// nil when the content is written (when following: when the log is closed and
// fully written) or LimitBytes is reached; an error wrapping ErrNotFound if the
// log does not exist and Follow is false, or if the log is deleted while being
// followed; ctx.Err() when ctx ends first.
//
// A follower watches the log's key prefix from the revision right after its
// initial read, so that it sees every chunk exactly once without polling.
// Any number of followers can stream one log concurrently.
func (s *Store) StreamLog(ctx context.Context, run RunRef, stage string, attempt int32, opts LogOptions, w io.Writer) error {
	keys, err := s.logKeys(run, stage, attempt)
	if err != nil {
		return err
	}
	sink := &logSink{w: w, remaining: -1}
	if opts.LimitBytes != nil {
		if *opts.LimitBytes < 0 {
			return fmt.Errorf("artifacts: invalid limitBytes %d", *opts.LimitBytes)
		}
		sink.remaining = *opts.LimitBytes
	}
	if opts.TailLines != nil && *opts.TailLines < 0 {
		return fmt.Errorf("artifacts: invalid tailLines %d", *opts.TailLines)
	}
	err = s.streamLog(ctx, keys, opts, sink)
	if errors.Is(err, errChunksGone) {
		// The log was moved into the object store while it was read.
		err = s.resumeFromObject(ctx, keys, err, sink)
	}
	if errors.Is(err, errLimitReached) {
		return nil
	}
	return err
}

func (s *Store) streamLog(ctx context.Context, keys logKeys, opts LogOptions, sink *logSink) error {
	if sink.remaining == 0 {
		return nil
	}
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
	}
	rev := resp.Header.Revision
	cur, err := s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
	if err != nil {
		return err
	}
	if cur.modRev == 0 && !opts.Follow {
		return fmt.Errorf("%w: no %s", ErrNotFound, keys.what)
	}
	if cur.meta.Object != "" {
		return s.streamLogObject(ctx, keys, cur.meta, opts.TailLines, sink)
	}
	var next int64
	if cur.modRev != 0 {
		from, skip := int64(0), 0
		if opts.TailLines != nil {
			if from, skip, sink.pos, err = s.tailStart(ctx, keys, cur.meta, *opts.TailLines); err != nil {
				return err
			}
		}
		if err := s.copyChunks(ctx, keys, cur.meta, from, skip, cur.meta.Chunks, sink); err != nil {
			return err
		}
		next = cur.meta.Chunks
		if cur.meta.Closed || !opts.Follow {
			return nil
		}
	}
	// Tell the log's writer that someone waits for its lines. Without that,
	// the follow still gets every line, only later.
	if unregister, err := s.registerFollower(ctx, keys); err != nil {
		klog.ErrorS(err, "Following a log without telling its writer: its lines may come later, in larger batches")
	} else {
		defer unregister()
	}
	return s.follow(ctx, keys, next, rev, sink)
}

// batchFor returns how many chunks to fetch per range request, based on the
// average chunk size of the log, so that small appends are read many at a time
// while a batch of full chunks stays at a bounded size.
func (s *Store) batchFor(m logMeta) int64 {
	maxBatch := max(int64(16<<20)/int64(s.chunkSize), 1)
	avg := int64(s.chunkSize)
	if m.Chunks > 0 {
		avg = max(m.Size/m.Chunks, 1)
	}
	return min(max(readBatchBytes/avg, 1), maxBatch)
}

// copyChunks writes chunks [from, to) of a log, skipping the first skip bytes
// of chunk from. Chunks are immutable once written, so they are read at the
// current revision.
func (s *Store) copyChunks(ctx context.Context, keys logKeys, m logMeta, from int64, skip int, to int64, sink *logSink) error {
	batch := s.batchFor(m)
	for from < to {
		end := min(from+batch, to)
		resp, err := s.client.Get(ctx, keys.chunk(from), clientv3.WithRange(keys.chunk(end)))
		if err != nil {
			return fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
		}
		if int64(len(resp.Kvs)) != end-from {
			return fmt.Errorf("%w: %s was deleted while being read", errChunksGone, keys.what)
		}
		for i, kv := range resp.Kvs {
			key := keys.chunk(from + int64(i))
			if string(kv.Key) != key {
				return fmt.Errorf("artifacts: %s: expected chunk %s, got %s", keys.what, key, kv.Key)
			}
			data, err := s.unseal(ctx, key, kv.Value)
			if err != nil {
				return err
			}
			if skip > 0 {
				data, skip = data[min(skip, len(data)):], 0
			}
			if err := sink.write(data); err != nil {
				return err
			}
		}
		from = end
	}
	return nil
}

// tailStart finds where the last n lines of a log start: the chunk, the
// offset in it, and the offset in the log. It scans the chunks backwards
// without keeping them. A newline at the very end of the content does not
// start another line.
func (s *Store) tailStart(ctx context.Context, keys logKeys, m logMeta, n int64) (int64, int, int64, error) {
	total := m.Chunks
	if n == 0 {
		return total, 0, m.Size, nil
	}
	batch := s.batchFor(m)
	last := true
	var after int64 // bytes of the chunks after the one scanned
	for end := total; end > 0; {
		start := max(end-batch, 0)
		resp, err := s.client.Get(ctx, keys.chunk(start), clientv3.WithRange(keys.chunk(end)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
		}
		if int64(len(resp.Kvs)) != end-start {
			return 0, 0, 0, fmt.Errorf("%w: %s was deleted while being read", errChunksGone, keys.what)
		}
		for i, kv := range resp.Kvs {
			seq := end - 1 - int64(i)
			data, err := s.unseal(ctx, keys.chunk(seq), kv.Value)
			if err != nil {
				return 0, 0, 0, err
			}
			if j := lastLinesStart(data, &n, &last); j >= 0 {
				if j == len(data) {
					return seq + 1, 0, m.Size - after, nil
				}
				return seq, j, m.Size - after - int64(len(data)-j), nil
			}
			after += int64(len(data))
		}
		end = start
	}
	return 0, 0, 0, nil
}

// lastLinesStart scans data, a piece of a log read backwards, for the start
// of the last *n lines: it returns the offset in data where they start, or
// -1 with *n lowered by the lines data ends. *last is true until a byte of
// the log has been scanned: a newline that ends the log starts no line.
func lastLinesStart(data []byte, n *int64, last *bool) int {
	for j := len(data) - 1; j >= 0; j-- {
		if data[j] == '\n' && !*last {
			if *n--; *n == 0 {
				return j + 1
			}
		}
		*last = false
	}
	return -1
}

// follow streams the chunks from sequence number next on, watching the log's
// prefix from revision rev+1, until the log is closed. If the watch breaks
// (compaction, leader loss), it catches up with a read and watches again.
func (s *Store) follow(ctx context.Context, keys logKeys, next, rev int64, sink *logSink) error {
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.client.Watch(wctx, keys.dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		done, err := s.consume(ctx, keys, wch, &next, sink)
		cancel()
		if done || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The watch ended without the log being closed: catch up and watch
		// again, after a short pause so that a failing etcd is not hammered.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := s.client.Get(ctx, keys.meta)
		if err != nil {
			return fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
		}
		rev = resp.Header.Revision
		cur, err := s.decodeLogMeta(ctx, keys.meta, resp.Kvs)
		if err != nil {
			return err
		}
		if cur.modRev == 0 {
			if next > 0 {
				return fmt.Errorf("%w: %s was deleted while being followed", ErrNotFound, keys.what)
			}
			continue
		}
		if cur.meta.Object != "" {
			return s.copyObject(ctx, keys, cur.meta, sink.pos, sink)
		}
		if err := s.copyChunks(ctx, keys, cur.meta, next, 0, cur.meta.Chunks, sink); err != nil {
			return err
		}
		next = max(next, cur.meta.Chunks)
		if cur.meta.Closed {
			return nil
		}
	}
}

// consume writes the chunks delivered by a watch. It returns done=true when
// the log is closed and written or on an error, and done=false when the watch
// ended and must be re-established.
func (s *Store) consume(ctx context.Context, keys logKeys, wch clientv3.WatchChan, next *int64, sink *logSink) (bool, error) {
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case wr, ok = <-wch:
		}
		if !ok || wr.Err() != nil {
			return false, nil
		}
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			if key == keys.meta {
				if ev.Type == mvccpb.DELETE {
					return true, fmt.Errorf("%w: %s was deleted while being followed", ErrNotFound, keys.what)
				}
				cur, err := s.decodeLogMeta(ctx, key, []*mvccpb.KeyValue{ev.Kv})
				if err != nil {
					return true, err
				}
				if cur.meta.Closed {
					// Normally every chunk has been seen by now; fetch any
					// that have not, to be safe. A log that ended in one
					// write to the object store (endLogInObject) has no
					// chunks: all of it is in its object.
					if cur.meta.Object != "" {
						return true, s.copyObject(ctx, keys, cur.meta, sink.pos, sink)
					}
					if *next < cur.meta.Chunks {
						if err := s.copyChunks(ctx, keys, cur.meta, *next, 0, cur.meta.Chunks, sink); err != nil {
							return true, err
						}
					}
					return true, nil
				}
				continue
			}
			seq, ok := keys.parseChunk(key)
			if !ok {
				continue
			}
			if ev.Type == mvccpb.DELETE {
				return true, fmt.Errorf("%w: %s was deleted while being followed", errChunksGone, keys.what)
			}
			if seq < *next {
				continue // already written
			}
			if seq > *next {
				if err := s.copyChunks(ctx, keys, logMeta{}, *next, 0, seq, sink); err != nil {
					return true, err
				}
			}
			data, err := s.unseal(ctx, key, ev.Kv.Value)
			if err != nil {
				return true, err
			}
			if err := sink.write(data); err != nil {
				return true, err
			}
			*next = seq + 1
		}
	}
}
