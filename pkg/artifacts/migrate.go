package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Migrated counts what MigrateToObjects moved.
type Migrated struct {
	// Artifacts are the plan parts and outputs moved, and Bytes their size.
	Artifacts int
	Bytes     int64
	// Logs are the finished logs moved.
	Logs int
}

// MigrateToObjects moves what etcd still holds into the object store: the
// plan parts and outputs stored before the server had one, and the finished
// logs. Each artifact moves on its own, as the upload of a new one does:
// its object is written, then its meta names it and its chunks go in one
// transaction that holds only if the meta is as it was read, so a migration
// that stops part-way loses nothing and the next one goes on where it
// stopped. Logs still being written stay; they move when they close.
func (s *Store) MigrateToObjects(ctx context.Context) (Migrated, error) {
	var moved Migrated
	if s.objects == nil {
		return moved, errors.New("artifacts: no object store to move the artifacts into (--artifact-store=s3)")
	}
	logger := klog.FromContext(ctx)
	key, end := s.prefix, clientv3.GetPrefixRangeEnd(s.prefix)
	for {
		resp, err := s.client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(1000), clientv3.WithKeysOnly())
		if err != nil {
			return moved, fmt.Errorf("artifacts: listing what etcd holds: %w", err)
		}
		for _, kv := range resp.Kvs {
			run, kind, ok := s.parseArtifactMetaKey(string(kv.Key))
			if !ok {
				continue
			}
			n, did, err := s.moveArtifact(ctx, run, kind)
			if err != nil {
				return moved, err
			}
			if did {
				moved.Artifacts++
				moved.Bytes += n
				if moved.Artifacts%1000 == 0 {
					logger.Info("Moving artifacts from etcd into the object store", "artifacts", moved.Artifacts, "bytes", moved.Bytes)
				}
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	logs, err := s.closedLogsInEtcd(ctx)
	if err != nil {
		return moved, err
	}
	for _, ref := range logs {
		did, err := s.compactLog(ctx, ref)
		if err != nil {
			return moved, err
		}
		if did {
			moved.Logs++
		}
	}
	return moved, nil
}

// parseArtifactMetaKey is the run and kind of an artifact's meta key
// (<prefix><namespace>/<name>/<uid>/<kind>/meta).
func (s *Store) parseArtifactMetaKey(key string) (RunRef, Kind, bool) {
	parts := strings.Split(strings.TrimPrefix(key, s.prefix), "/")
	if len(parts) != 5 || parts[4] != "meta" {
		return RunRef{}, "", false
	}
	kind := Kind(parts[3])
	if _, err := s.limits.forKind(kind); err != nil {
		return RunRef{}, "", false
	}
	var ref [3]string
	for i := range ref {
		v, err := url.PathUnescape(parts[i])
		if err != nil || v == "" {
			return RunRef{}, "", false
		}
		ref[i] = v
	}
	return RunRef{Namespace: ref[0], Name: ref[1], UID: ref[2]}, kind, true
}

// moveArtifact moves the artifact kind of run into the object store, if
// etcd holds it, and says how many bytes it moved.
func (s *Store) moveArtifact(ctx context.Context, run RunRef, kind Kind) (int64, bool, error) {
	keys, _, err := s.artifactKeys(run, kind)
	if err != nil {
		return 0, false, err
	}
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return 0, false, fmt.Errorf("artifacts: reading %s of run %s: %w", kind, run, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil // gone since it was listed
	}
	modRev := resp.Kvs[0].ModRevision
	m, err := s.decodeArtifactMeta(ctx, keys.meta, resp.Kvs[0].Value)
	if err != nil {
		return 0, false, err
	}
	if m.Object != "" {
		return 0, false, nil
	}
	// Get reads the chunks and fails at their end unless they hash to the
	// meta's digest: no corrupt artifact is moved.
	rc, _, err := s.Get(ctx, run, kind)
	if err != nil {
		return 0, false, err
	}
	// A name of its own: another replica moving the same artifact at once
	// writes another object, and deletes only its own when it loses.
	gen, err := newGeneration()
	if err != nil {
		rc.Close()
		return 0, false, err
	}
	name := objectPrefix(run) + string(kind) + "/" + gen
	err = s.objects.Put(ctx, name, rc)
	rc.Close()
	if err != nil {
		s.deleteObjects(ctx, []string{name})
		return 0, false, fmt.Errorf("artifacts: moving %s of run %s into the object store: %w", kind, run, err)
	}
	moved := m
	moved.Object, moved.Chunks = name, 0
	raw, err := json.Marshal(moved)
	if err != nil {
		return 0, false, err
	}
	sealed, err := s.seal(ctx, keys.meta, raw)
	if err != nil {
		return 0, false, err
	}
	txn, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(keys.meta), "=", modRev)).
		Then(clientv3.OpPut(keys.meta, sealed, clientv3.WithIgnoreLease()), clientv3.OpDelete(keys.genPrefix(m.Generation), clientv3.WithPrefix())).
		Commit()
	if err != nil || !txn.Succeeded {
		// Replaced or deleted since it was read: the object names nothing.
		s.deleteObjects(ctx, []string{name})
		if err != nil {
			return 0, false, fmt.Errorf("artifacts: recording %s of run %s in the object store: %w", kind, run, err)
		}
		return 0, false, nil
	}
	return m.Size, true, nil
}

// closedLogsInEtcd lists the closed logs whose chunks etcd still holds: the
// usage keys name every log in etcd.
func (s *Store) closedLogsInEtcd(ctx context.Context) ([]logRef, error) {
	dir := s.prefix + usageDir
	var closed []logRef
	key, end := dir, clientv3.GetPrefixRangeEnd(dir)
	for {
		resp, err := s.client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(1000), clientv3.WithKeysOnly())
		if err != nil {
			return nil, fmt.Errorf("artifacts: listing the logs in etcd: %w", err)
		}
		for _, kv := range resp.Kvs {
			ref, ok := parseUsageKey(strings.TrimPrefix(string(kv.Key), dir))
			if !ok {
				continue
			}
			keys, err := s.logKeys(ref.run, ref.stage, ref.attempt)
			if err != nil {
				continue
			}
			m, err := s.client.Get(ctx, keys.meta)
			if err != nil {
				return nil, fmt.Errorf("artifacts: reading %s: %w", keys.what, err)
			}
			cur, err := s.decodeLogMeta(ctx, keys.meta, m.Kvs)
			if err == nil && cur.meta.Closed && cur.meta.Object == "" {
				closed = append(closed, ref)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return closed, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
