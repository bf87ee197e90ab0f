package artifacts

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// usageRefresh is how old the store's view of the bytes every log takes may
// get before an append reads it again. Other replicas' appends are seen
// within it; this replica's own are counted at once.
const usageRefresh = 5 * time.Second

// usageDir is the key segment under the prefix that holds one small key per
// log with its size in bytes. "_" cannot start a namespace name, so it never
// collides with a run's keys.
const usageDir = "_log-usage/"

// logUsage is the store's view of the bytes stored in logs: per run, per
// namespace and in total. Each log's size is kept in a usage key written in
// the same transaction as its chunks, on the run's lease, so the sums follow
// runs that are deleted or expire.
type logUsage struct {
	mu        sync.Mutex
	refreshed time.Time
	byRun     map[string]int64 // usageRunPrefix -> bytes
	byNS      map[string]int64
	total     int64
	// refreshing serializes reads of the usage keys.
	refreshing sync.Mutex
}

// usageRunPrefix is the prefix of the usage keys of run's logs.
func (s *Store) usageRunPrefix(run RunRef) string {
	return s.prefix + usageDir + url.PathEscape(run.Namespace) + "/" + url.PathEscape(run.Name) + "/" + url.PathEscape(run.UID) + "/"
}

// usageKey is the usage key of one log.
func (s *Store) usageKey(run RunRef, stage string, attempt int32) string {
	return fmt.Sprintf("%s%s/%010d", s.usageRunPrefix(run), url.PathEscape(stage), attempt)
}

// logBudget is how many more bytes the logs of run may take, and the marker
// that ends a log cut by it; no marker means no budget binds before maxRoom.
func (s *Store) logBudget(ctx context.Context, run RunRef, maxRoom int64) (int64, []byte, error) {
	if err := s.refreshUsage(ctx); err != nil {
		return 0, nil, err
	}
	u := &s.usage
	u.mu.Lock()
	runUsed, nsUsed, total := u.byRun[s.usageRunPrefix(run)], u.byNS[run.Namespace], u.total
	u.mu.Unlock()
	room, mark := maxRoom, []byte(nil)
	for _, b := range []struct {
		limit, used int64
		marker      string
	}{
		{s.limits.TotalLogs, total, fmt.Sprintf("\n[terrarun: truncated: the server's log storage budget of %d bytes is used up; an administrator deletes old runs or raises --max-total-log-bytes]\n", s.limits.TotalLogs)},
		{s.limits.NamespaceLogs, nsUsed, fmt.Sprintf("\n[terrarun: truncated: the logs of namespace %s reached their budget of %d bytes; delete old runs to free it]\n", run.Namespace, s.limits.NamespaceLogs)},
		{s.limits.RunLogs, runUsed, fmt.Sprintf("\n[terrarun: truncated: the logs of this run reached their budget of %d bytes]\n", s.limits.RunLogs)},
	} {
		if r := max(b.limit-b.used, 0); r < room {
			room, mark = r, []byte(b.marker)
		}
	}
	return room, mark, nil
}

// countLog adds n bytes of run's logs to the store's view.
func (s *Store) countLog(run RunRef, n int64) {
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byRun == nil {
		return
	}
	u.byRun[s.usageRunPrefix(run)] += n
	u.byNS[run.Namespace] += n
	u.total += n
}

// refreshUsage reads the usage keys again when the view is older than
// usageRefresh.
func (s *Store) refreshUsage(ctx context.Context) error {
	u := &s.usage
	u.mu.Lock()
	fresh := time.Since(u.refreshed) < usageRefresh
	u.mu.Unlock()
	if fresh {
		return nil
	}
	u.refreshing.Lock()
	defer u.refreshing.Unlock()
	u.mu.Lock()
	fresh = time.Since(u.refreshed) < usageRefresh
	u.mu.Unlock()
	if fresh {
		return nil
	}
	byRun, byNS, total := map[string]int64{}, map[string]int64{}, int64(0)
	dir := s.prefix + usageDir
	key, end := dir, clientv3.GetPrefixRangeEnd(dir)
	for {
		resp, err := s.client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(10000))
		if err != nil {
			return fmt.Errorf("artifacts: reading the log usage: %w", err)
		}
		for _, kv := range resp.Kvs {
			n, err := strconv.ParseInt(string(kv.Value), 10, 64)
			if err != nil || n < 0 {
				continue
			}
			rest := strings.TrimPrefix(string(kv.Key), dir)
			parts := strings.SplitN(rest, "/", 4)
			if len(parts) < 4 {
				continue
			}
			ns, err := url.PathUnescape(parts[0])
			if err != nil {
				continue
			}
			byRun[dir+strings.Join(parts[:3], "/")+"/"] += n
			byNS[ns] += n
			total += n
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	u.mu.Lock()
	u.byRun, u.byNS, u.total, u.refreshed = byRun, byNS, total, time.Now()
	u.mu.Unlock()
	return nil
}

// forgetRunUsage drops the deleted run's logs from the store's view.
func (s *Store) forgetRunUsage(run RunRef) {
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	key := s.usageRunPrefix(run)
	n, ok := u.byRun[key]
	if !ok {
		return
	}
	delete(u.byRun, key)
	u.byNS[run.Namespace] -= n
	u.total -= n
}
