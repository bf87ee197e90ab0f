// Package statestore keeps the Terraform state of runs whose backend is the
// one terrarun serves (the default in cluster mode): the state, its last
// versions and its lock live in terrarun's own etcd, next to the runs, and
// only the executor of a run's current stage reaches them, through the run's
// state and statelock subresources. No Kubernetes credential is involved, so
// a run's code can reach its own state and nothing else of its namespace.
//
// # Key layout
//
// With <state> = <namespace>/<namespace UID>/<workspace> (each segment
// escaped with url.PathEscape) under the prefix (default "/terrarun/states/"):
//
//	meta/<state>                    the versions kept, newest first (JSON)
//	lock/<state>                    the lock, with the stage that holds it (JSON)
//	data/<state>/<generation>/<i>   chunk i of a version's gzip-compressed bytes
//
// The namespace's UID is part of the key, so that a namespace deleted and
// created again under its name never sees its predecessor's state; Sweep
// removes the states of namespaces that are gone. served-since records
// when a server first served states from the store.
//
// # Writes
//
// A version is written only by the holder of the state's lock, with the
// lock's ID, as terraform's http backend does. Its chunks go under a fresh
// generation, then the meta is swapped in a transaction that also checks
// that neither the meta nor the lock changed since they were read; versions
// beyond Limits.Versions are deleted afterwards. Readers read the chunks at
// the revision they read the meta at, so they never see a mix.
//
// # Locks
//
// A lock names the stage that holds it, as the server authenticated it, not
// as the stage describes itself. A lock whose stage has ended is broken by
// the next stage that asks for it (the caller decides, with its alive
// function), so a lost pod or a killed engine never leaves a state locked.
package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"
)

const (
	defaultPrefix = "/terrarun/states/"
	chunkSize     = 256 << 10
	// maxLockInfo bounds the lock information a stage sends.
	maxLockInfo = 16 << 10
	// commitRetries bounds the retries of a write whose meta or lock
	// changed between its read and its commit.
	commitRetries = 5
)

var (
	// ErrNotFound means the state has no version yet.
	ErrNotFound = errors.New("the state has no version yet")
	// ErrLocked is returned, wrapped, by Lock when another stage that has
	// not ended holds the lock.
	ErrLocked = errors.New("the state is locked")
	// ErrNotHolder is returned, wrapped, by Put and Unlock when the caller
	// does not hold the lock it names.
	ErrNotHolder = errors.New("the state is not locked by this stage")
	// ErrTooLarge is returned, wrapped, when a version exceeds a limit.
	ErrTooLarge = errors.New("the state exceeds a limit")
	// ErrInvalid is returned, wrapped, for a body that is not a Terraform
	// state or a lock that is not a lock.
	ErrInvalid = errors.New("invalid state or lock")
)

// Ref names a state: a Terraform workspace of a namespace.
type Ref struct {
	Namespace    string
	NamespaceUID string
	Workspace    string
}

func (r Ref) String() string { return r.Namespace + "/" + r.Workspace }

func (r Ref) validate() error {
	if r.Namespace == "" || r.NamespaceUID == "" || r.Workspace == "" {
		return fmt.Errorf("statestore: invalid state reference %q (uid %q) workspace %q: all are required", r.Namespace, r.NamespaceUID, r.Workspace)
	}
	return nil
}

// Holder is the stage execution that holds a lock or wrote a version.
type Holder struct {
	Run     string `json:"run"`
	RunUID  string `json:"runUID"`
	Stage   string `json:"stage"`
	Attempt int32  `json:"attempt"`
}

func (h Holder) String() string {
	return fmt.Sprintf("run %s (uid %s), %s stage attempt %d", h.Run, h.RunUID, h.Stage, h.Attempt)
}

// Lock is a state's lock.
type Lock struct {
	// ID is the engine's lock ID.
	ID string `json:"id"`
	// Info is the engine's lock information, as the stage sent it: the
	// operation, who and when, for messages. Never trusted for a decision.
	Info json.RawMessage `json:"info,omitempty"`
	// Holder is the stage that took the lock, as the server knows it.
	Holder  Holder    `json:"holder"`
	Created time.Time `json:"created"`
}

// Version is one stored version of a state.
type Version struct {
	Serial  int64  `json:"serial"`
	Lineage string `json:"lineage"`
	// Size is the state's size; Stored, what its compressed chunks take.
	Size   int64  `json:"size"`
	Stored int64  `json:"stored"`
	SHA256 string `json:"sha256"`
	// Writer wrote the version; ImportedFrom names where an imported
	// version came from instead.
	Writer       *Holder   `json:"writer,omitempty"`
	ImportedFrom string    `json:"importedFrom,omitempty"`
	Created      time.Time `json:"created"`
	Generation   string    `json:"generation"`
	Chunks       int64     `json:"chunks"`
}

type meta struct {
	// Versions, newest first.
	Versions []Version `json:"versions"`
}

// Limits bound what states take. A zero field means its default.
type Limits struct {
	// State bounds the size of one version; default 64 MiB.
	State int64
	// Namespace bounds the stored (compressed) bytes of every version of
	// every state of a namespace; default 256 MiB.
	Namespace int64
	// Versions is how many versions of a state are kept; default 10.
	Versions int
}

func (l Limits) withDefaults() Limits {
	if l.State <= 0 {
		l.State = 64 << 20
	}
	if l.Namespace <= 0 {
		l.Namespace = 256 << 20
	}
	if l.Versions <= 0 {
		l.Versions = 10
	}
	return l
}

// Store keeps states in etcd. It is safe for concurrent use, also by
// several Stores sharing one etcd.
type Store struct {
	client      *clientv3.Client
	prefix      string
	transformer value.Transformer
	limits      Limits
}

// New returns a Store over client. transformer (nil: none) transforms every
// stored value, as the artifacts' does, so that encryption at rest applies.
func New(client *clientv3.Client, transformer value.Transformer, limits Limits) *Store {
	return &Store{client: client, prefix: defaultPrefix, transformer: transformer, limits: limits.withDefaults()}
}

// Limits returns the store's limits, defaults filled in.
func (s *Store) Limits() Limits { return s.limits }

func (s *Store) key(kind string, r Ref) string {
	return s.prefix + kind + "/" + url.PathEscape(r.Namespace) + "/" + url.PathEscape(r.NamespaceUID) + "/" + url.PathEscape(r.Workspace)
}

func (s *Store) genPrefix(r Ref, gen string) string { return s.key("data", r) + "/" + gen + "/" }

func chunkKey(prefix string, i int64) string { return fmt.Sprintf("%s%010d", prefix, i) }

func (s *Store) seal(ctx context.Context, key string, data []byte) (string, error) {
	if s.transformer == nil {
		return string(data), nil
	}
	out, err := s.transformer.TransformToStorage(ctx, data, value.DefaultContext(key))
	if err != nil {
		return "", fmt.Errorf("statestore: transforming %s for storage: %w", key, err)
	}
	return string(out), nil
}

func (s *Store) unseal(ctx context.Context, key string, data []byte) ([]byte, error) {
	if s.transformer == nil {
		return data, nil
	}
	out, _, err := s.transformer.TransformFromStorage(ctx, data, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("statestore: transforming %s from storage: %w", key, err)
	}
	return out, nil
}

// decode decodes the value of key, the first of kvs, into v; it returns its
// ModRevision, or 0 when kvs is empty.
func (s *Store) decode(ctx context.Context, key string, kvs []*mvccpb.KeyValue, v any) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	data, err := s.unseal(ctx, key, kvs[0].Value)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return 0, fmt.Errorf("statestore: decoding %s: %w", key, err)
	}
	return kvs[0].ModRevision, nil
}

// Get returns the newest version of the state and its bytes, or an error
// wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, r Ref) ([]byte, Version, error) {
	if err := r.validate(); err != nil {
		return nil, Version{}, err
	}
	metaKey := s.key("meta", r)
	resp, err := s.client.Get(ctx, metaKey)
	if err != nil {
		return nil, Version{}, fmt.Errorf("statestore: reading the state of %s: %w", r, err)
	}
	var m meta
	if _, err := s.decode(ctx, metaKey, resp.Kvs, &m); err != nil {
		return nil, Version{}, err
	}
	if len(m.Versions) == 0 {
		return nil, Version{}, fmt.Errorf("%w: %s", ErrNotFound, r)
	}
	v := m.Versions[0]
	prefix := s.genPrefix(r, v.Generation)
	var compressed bytes.Buffer
	for next := int64(0); next < v.Chunks; {
		end := min(next+16, v.Chunks)
		cr, err := s.client.Get(ctx, chunkKey(prefix, next), clientv3.WithRange(chunkKey(prefix, end)), clientv3.WithRev(resp.Header.Revision))
		if err != nil {
			return nil, Version{}, fmt.Errorf("statestore: reading the state of %s: %w", r, err)
		}
		if int64(len(cr.Kvs)) != end-next {
			return nil, Version{}, fmt.Errorf("statestore: the state of %s has %d of chunks %d to %d", r, len(cr.Kvs), next, end)
		}
		for i, kv := range cr.Kvs {
			data, err := s.unseal(ctx, chunkKey(prefix, next+int64(i)), kv.Value)
			if err != nil {
				return nil, Version{}, err
			}
			compressed.Write(data)
		}
		next = end
	}
	zr, err := gzip.NewReader(&compressed)
	if err != nil {
		return nil, Version{}, fmt.Errorf("statestore: the state of %s is corrupt: %w", r, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, v.Size+1))
	if err != nil || int64(len(data)) != v.Size || digest(data) != v.SHA256 {
		return nil, Version{}, fmt.Errorf("statestore: the state of %s does not match its recorded size and digest", r)
	}
	return data, v, nil
}

// Versions returns the versions kept of the state, newest first.
func (s *Store) Versions(ctx context.Context, r Ref) ([]Version, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	key := s.key("meta", r)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("statestore: reading the state of %s: %w", r, err)
	}
	var m meta
	_, err = s.decode(ctx, key, resp.Kvs, &m)
	return m.Versions, err
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Put stores data as the state's newest version, written by holder, which
// must hold the state's lock with ID lockID.
func (s *Store) Put(ctx context.Context, r Ref, holder Holder, lockID string, data []byte) (Version, error) {
	return s.put(ctx, r, data, func(lock *Lock, m *meta) error {
		if lock == nil || lock.ID != lockID || lock.Holder != holder {
			return fmt.Errorf("%w: write the state with the ID of the lock this stage holds", ErrNotHolder)
		}
		return nil
	}, Version{Writer: &holder})
}

// Import stores data as the state's first version, recording source as
// where it came from. It returns false, and stores nothing, when the state
// already has a version.
func (s *Store) Import(ctx context.Context, r Ref, source string, data []byte) (bool, error) {
	var exists = errors.New("exists")
	_, err := s.put(ctx, r, data, func(_ *Lock, m *meta) error {
		if len(m.Versions) > 0 {
			return exists
		}
		return nil
	}, Version{ImportedFrom: source})
	if errors.Is(err, exists) {
		return false, nil
	}
	return err == nil, err
}

// put writes data as a new version v once check, given the lock and meta
// as they are, allows it.
func (s *Store) put(ctx context.Context, r Ref, data []byte, check func(*Lock, *meta) error, v Version) (Version, error) {
	if err := r.validate(); err != nil {
		return Version{}, err
	}
	if int64(len(data)) > s.limits.State {
		return Version{}, fmt.Errorf("%w: the state is %d bytes, over the limit of %d bytes a state may take", ErrTooLarge, len(data), s.limits.State)
	}
	var head struct {
		Version *int   `json:"version"`
		Serial  int64  `json:"serial"`
		Lineage string `json:"lineage"`
	}
	if err := json.Unmarshal(data, &head); err != nil || head.Version == nil {
		return Version{}, fmt.Errorf("%w: the body is not a Terraform state (a JSON object with a version)", ErrInvalid)
	}
	var compressed bytes.Buffer
	zw := gzip.NewWriter(&compressed)
	_, _ = zw.Write(data)
	_ = zw.Close()
	gen, err := newGeneration()
	if err != nil {
		return Version{}, err
	}
	v.Serial, v.Lineage, v.Size, v.SHA256, v.Generation = head.Serial, head.Lineage, int64(len(data)), digest(data), gen
	v.Stored, v.Created = int64(compressed.Len()), time.Now().UTC().Truncate(time.Second)
	prefix := s.genPrefix(r, gen)
	var chunks []clientv3.Op
	for b := compressed.Bytes(); len(b) > 0; {
		n := min(len(b), chunkSize)
		key := chunkKey(prefix, int64(len(chunks)))
		sealed, err := s.seal(ctx, key, b[:n])
		if err != nil {
			return Version{}, err
		}
		chunks = append(chunks, clientv3.OpPut(key, sealed))
		b = b[n:]
	}
	v.Chunks = int64(len(chunks))
	// Every chunk but the last goes ahead, one request each; the last goes
	// with the meta.
	written := false
	cleanup := func() {
		if written {
			if _, err := s.client.Delete(context.WithoutCancel(ctx), prefix, clientv3.WithPrefix()); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to delete the chunks of a state version that was not stored", "state", r.String())
			}
		}
	}
	for _, op := range chunks[:len(chunks)-1] {
		if _, err := s.client.Do(ctx, op); err != nil {
			cleanup()
			return Version{}, fmt.Errorf("statestore: writing the state of %s: %w", r, err)
		}
		written = true
	}
	metaKey, lockKey := s.key("meta", r), s.key("lock", r)
	for try := 0; ; try++ {
		resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(metaKey), clientv3.OpGet(lockKey)).Commit()
		if err != nil {
			cleanup()
			return Version{}, fmt.Errorf("statestore: reading the state of %s: %w", r, err)
		}
		var (
			m    meta
			lock Lock
		)
		metaRev, err := s.decode(ctx, metaKey, resp.Responses[0].GetResponseRange().Kvs, &m)
		if err != nil {
			cleanup()
			return Version{}, err
		}
		lockRev, err := s.decode(ctx, lockKey, resp.Responses[1].GetResponseRange().Kvs, &lock)
		if err != nil {
			cleanup()
			return Version{}, err
		}
		lockp := &lock
		if lockRev == 0 {
			lockp = nil
		}
		if err := check(lockp, &m); err != nil {
			cleanup()
			return Version{}, err
		}
		versions := append([]Version{v}, m.Versions...)
		dropped := versions[min(len(versions), s.limits.Versions):]
		versions = versions[:min(len(versions), s.limits.Versions)]
		if err := s.checkBudget(ctx, r, m.Versions, versions); err != nil {
			cleanup()
			return Version{}, err
		}
		encoded, _ := json.Marshal(meta{Versions: versions})
		sealed, err := s.seal(ctx, metaKey, encoded)
		if err != nil {
			cleanup()
			return Version{}, err
		}
		txn, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(metaKey), "=", metaRev),
			clientv3.Compare(clientv3.ModRevision(lockKey), "=", lockRev),
		).Then(clientv3.OpPut(metaKey, sealed), chunks[len(chunks)-1]).Commit()
		if err != nil {
			cleanup()
			return Version{}, fmt.Errorf("statestore: writing the state of %s: %w", r, err)
		}
		if txn.Succeeded {
			for _, old := range dropped {
				if _, err := s.client.Delete(ctx, s.genPrefix(r, old.Generation), clientv3.WithPrefix()); err != nil {
					klog.FromContext(ctx).Error(err, "Failed to delete an old state version", "state", r.String(), "generation", old.Generation)
				}
			}
			return v, nil
		}
		if try == commitRetries {
			cleanup()
			return Version{}, fmt.Errorf("statestore: the state of %s changed %d times while it was written; try again", r, commitRetries+1)
		}
	}
}

// checkBudget refuses a write that would make the namespace's states take
// more than Limits.Namespace: what they take now, with the state's versions
// old replaced by next.
func (s *Store) checkBudget(ctx context.Context, r Ref, old, next []Version) error {
	prefix := s.prefix + "meta/" + url.PathEscape(r.Namespace) + "/"
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("statestore: reading the states of namespace %s: %w", r.Namespace, err)
	}
	total := int64(0)
	for _, kv := range resp.Kvs {
		var m meta
		if _, err := s.decode(ctx, string(kv.Key), []*mvccpb.KeyValue{kv}, &m); err != nil {
			return err
		}
		total += stored(m.Versions)
	}
	total += stored(next) - stored(old)
	if total > s.limits.Namespace {
		return fmt.Errorf("%w: the states of namespace %s would take %d bytes, over the namespace's limit of %d bytes (older versions count too; delete the workspaces' states no longer used)",
			ErrTooLarge, r.Namespace, total, s.limits.Namespace)
	}
	return nil
}

func stored(vs []Version) int64 {
	n := int64(0)
	for _, v := range vs {
		n += v.Stored
	}
	return n
}

func newGeneration() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("statestore: generating a generation ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// LockOf returns the state's lock, or nil.
func (s *Store) LockOf(ctx context.Context, r Ref) (*Lock, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	key := s.key("lock", r)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("statestore: reading the lock of %s: %w", r, err)
	}
	var lock Lock
	rev, err := s.decode(ctx, key, resp.Kvs, &lock)
	if err != nil || rev == 0 {
		return nil, err
	}
	return &lock, nil
}

// Lock takes the state's lock for holder, with the engine's lock ID and
// information. When another holder has it, alive says whether that
// holder's stage goes on: if so, Lock returns that lock and an error
// wrapping ErrLocked; if not, the lock is taken over, and the broken lock
// is returned with a nil error. A holder asking again gets its lock again.
func (s *Store) Lock(ctx context.Context, r Ref, holder Holder, id string, info json.RawMessage, alive func(context.Context, Holder) (bool, error)) (*Lock, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	if id == "" || len(id) > 256 {
		return nil, fmt.Errorf("%w: a lock needs an ID of 1 to 256 bytes", ErrInvalid)
	}
	if len(info) > maxLockInfo || (len(info) > 0 && !json.Valid(info)) {
		return nil, fmt.Errorf("%w: the lock information must be JSON of at most %d bytes", ErrInvalid, maxLockInfo)
	}
	key := s.key("lock", r)
	encoded, _ := json.Marshal(Lock{ID: id, Info: info, Holder: holder, Created: time.Now().UTC().Truncate(time.Second)})
	sealed, err := s.seal(ctx, key, encoded)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		resp, err := s.client.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("statestore: reading the lock of %s: %w", r, err)
		}
		var cur Lock
		rev, err := s.decode(ctx, key, resp.Kvs, &cur)
		if err != nil {
			return nil, err
		}
		var broken *Lock
		if rev != 0 && cur.Holder != holder {
			ok, err := alive(ctx, cur.Holder)
			if err != nil {
				return nil, err
			}
			if ok {
				return &cur, fmt.Errorf("%w by %s", ErrLocked, cur.Holder)
			}
			broken = &cur
		}
		txn, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, sealed)).Commit()
		if err != nil {
			return nil, fmt.Errorf("statestore: locking %s: %w", r, err)
		}
		if txn.Succeeded {
			return broken, nil
		}
		if try == commitRetries {
			return nil, fmt.Errorf("statestore: the lock of %s changed %d times while it was taken; try again", r, commitRetries+1)
		}
	}
}

// Unlock releases the state's lock, which holder must hold with ID id, or,
// with force, which anyone holds with ID id. A state that is not locked is
// not an error.
func (s *Store) Unlock(ctx context.Context, r Ref, holder Holder, id string, force bool) error {
	if err := r.validate(); err != nil {
		return err
	}
	key := s.key("lock", r)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("statestore: reading the lock of %s: %w", r, err)
	}
	var cur Lock
	rev, err := s.decode(ctx, key, resp.Kvs, &cur)
	if err != nil || rev == 0 {
		return err
	}
	if cur.ID != id {
		return fmt.Errorf("%w: it is held by %s with another ID", ErrNotHolder, cur.Holder)
	}
	if cur.Holder != holder && !force {
		return fmt.Errorf("%w: it is held by %s", ErrNotHolder, cur.Holder)
	}
	txn, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("statestore: unlocking %s: %w", r, err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("%w: the lock changed while it was released", ErrNotHolder)
	}
	return nil
}

// Namespaces returns the namespaces, by name and UID, that have states.
func (s *Store) Namespaces(ctx context.Context) (map[[2]string]bool, error) {
	prefix := s.prefix + "meta/"
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("statestore: listing states: %w", err)
	}
	out := map[[2]string]bool{}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 3 {
			continue
		}
		ns, err1 := url.PathUnescape(parts[0])
		uid, err2 := url.PathUnescape(parts[1])
		if err1 == nil && err2 == nil {
			out[[2]string{ns, uid}] = true
		}
	}
	return out, nil
}

// DeleteNamespace removes every state, version and lock of the namespace
// with that name and UID.
func (s *Store) DeleteNamespace(ctx context.Context, namespace, uid string) error {
	seg := url.PathEscape(namespace) + "/" + url.PathEscape(uid) + "/"
	ops := []clientv3.Op{}
	for _, kind := range []string{"meta", "lock", "data"} {
		ops = append(ops, clientv3.OpDelete(s.prefix+kind+"/"+seg, clientv3.WithPrefix()))
	}
	if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("statestore: deleting the states of namespace %s (uid %s): %w", namespace, uid, err)
	}
	return nil
}

// ServedSince returns when a server first served states from this store:
// recorded by the first call, read by every later one.
func (s *Store) ServedSince(ctx context.Context) (time.Time, error) {
	key := s.prefix + "served-since"
	now := time.Now().UTC().Format(time.RFC3339Nano)
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, now)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return time.Time{}, fmt.Errorf("statestore: reading when states were first served: %w", err)
	}
	if resp.Succeeded {
		return time.Parse(time.RFC3339Nano, now)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return time.Time{}, errors.New("statestore: when states were first served is not recorded")
	}
	return time.Parse(time.RFC3339Nano, string(kvs[0].Value))
}

// Sweep removes the states of every namespace that exists no more: exists
// says whether the namespace of that name and UID does. It returns the
// namespaces whose states it removed, as "name (uid UID)".
func (s *Store) Sweep(ctx context.Context, exists func(ctx context.Context, namespace, uid string) (bool, error)) ([]string, error) {
	namespaces, err := s.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for ns := range namespaces {
		ok, err := exists(ctx, ns[0], ns[1])
		if err != nil {
			return removed, err
		}
		if ok {
			continue
		}
		if err := s.DeleteNamespace(ctx, ns[0], ns[1]); err != nil {
			return removed, err
		}
		removed = append(removed, ns[0]+" (uid "+ns[1]+")")
	}
	return removed, nil
}
