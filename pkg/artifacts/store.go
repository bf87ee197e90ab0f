package artifacts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/terrarun/terrarun/pkg/artifacts/objectstore"
)

const (
	defaultPrefix    = "/terrarun/artifacts/"
	defaultRetention = 720 * time.Hour
	defaultChunkSize = 256 << 10
	// maxChunkSize keeps every request (one chunk, its transformer overhead
	// and a small meta value) well under etcd's default 1.5 MiB limit.
	maxChunkSize = 1 << 20

	// readBatchBytes bounds the bytes fetched by one range request when
	// reading chunks.
	readBatchBytes = 2 << 20

	// cacheMaxEntries bounds the per-store caches of lease IDs and log metas.
	cacheMaxEntries = 4096
)

// RunRef identifies the run that artifacts belong to.
type RunRef struct {
	// Namespace of the TerraformRun.
	Namespace string
	// Name of the TerraformRun.
	Name string
	// UID of the TerraformRun. It is part of every key, so that a run
	// re-created with the same name does not see the artifacts of the old one.
	UID string
}

// String returns "namespace/name (uid UID)", for messages.
func (r RunRef) String() string { return r.Namespace + "/" + r.Name + " (uid " + r.UID + ")" }

func (r RunRef) validate() error {
	if r.Namespace == "" || r.Name == "" || r.UID == "" {
		return fmt.Errorf("artifacts: invalid run reference %q/%q uid %q: namespace, name and uid are required", r.Namespace, r.Name, r.UID)
	}
	return nil
}

// Kind is the kind of a run artifact.
type Kind string

const (
	// PlanFile is the binary plan file written by terraform plan -out.
	PlanFile Kind = "plan-file"
	// PlanText is the human-readable plan, the output of terraform show.
	PlanText Kind = "plan-text"
	// PlanJSON is the redacted output of terraform show -json.
	PlanJSON Kind = "plan-json"
	// PlanSource is a tar.gz of the configuration that was planned.
	PlanSource Kind = "plan-source"
	// Outputs is the output of terraform output -json.
	Outputs Kind = "outputs"
)

// Limits holds the maximum number of bytes stored per artifact. A value of 0
// means the default.
type Limits struct {
	// PlanFile limits the plan file; default 64 MiB. A larger plan file is
	// rejected rather than truncated.
	PlanFile int64
	// PlanText limits the plan text; default 32 MiB.
	PlanText int64
	// PlanJSON limits the redacted plan JSON; default 64 MiB.
	PlanJSON int64
	// PlanSource limits the configuration snapshot; default 16 MiB.
	PlanSource int64
	// Outputs limits the outputs JSON; default 4 MiB.
	Outputs int64
	// Log limits the log of one stage attempt; default 64 MiB.
	Log int64
	// RunLogs limits the logs of one run together (every stage and
	// attempt); default 256 MiB.
	RunLogs int64
	// NamespaceLogs limits the logs of all runs of one namespace; default
	// 1 GiB.
	NamespaceLogs int64
	// TotalLogs limits the logs of all runs; default 1.5 GiB, under etcd's
	// default quota of 2 GiB.
	TotalLogs int64
}

func (l Limits) withDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.PlanFile, 64<<20)
	def(&l.PlanText, 32<<20)
	def(&l.PlanJSON, 64<<20)
	def(&l.PlanSource, 16<<20)
	def(&l.Outputs, 4<<20)
	def(&l.Log, 64<<20)
	def(&l.RunLogs, 256<<20)
	def(&l.NamespaceLogs, 1<<30)
	def(&l.TotalLogs, 3<<29)
	return l
}

func (l Limits) forKind(k Kind) (int64, error) {
	switch k {
	case PlanFile:
		return l.PlanFile, nil
	case PlanText:
		return l.PlanText, nil
	case PlanJSON:
		return l.PlanJSON, nil
	case PlanSource:
		return l.PlanSource, nil
	case Outputs:
		return l.Outputs, nil
	}
	return 0, fmt.Errorf("artifacts: unknown artifact kind %q", string(k))
}

// Options configures a Store. The zero value gives the defaults.
type Options struct {
	// Prefix is the etcd key prefix of all artifacts; default
	// "/terrarun/artifacts/". A trailing "/" is added if missing. It must not
	// overlap the prefix of the API objects.
	Prefix string
	// Transformer transforms every stored value (all kinds, logs and metas)
	// with value.DefaultContext(key) as authenticated data, so that encryption
	// at rest configured with --encryption-provider-config applies. nil means
	// the identity transformation.
	Transformer value.Transformer
	// Limits are the per-artifact size limits.
	Limits Limits
	// Retention is the TTL of the lease that every key of a run is attached
	// to, counted from the first write of the run; default 720h. etcd rounds
	// it up to whole seconds and to its minimum lease TTL.
	Retention time.Duration
	// Objects, when set, keeps the plan parts, the outputs and the finished
	// logs in an object store, and etcd their metas only; a log stays in
	// etcd while its stage writes it (RunObjectMaintenance moves it).
	Objects *objectstore.Store
	// ChunkSize is the size of the chunks that artifacts and logs are split
	// into; default 256 KiB. Values above 1 MiB are lowered to 1 MiB to stay
	// well under etcd's 1.5 MiB request limit.
	ChunkSize int
}

// Store keeps run artifacts and logs in etcd. It is safe for concurrent use,
// also by several Stores (for example on several server replicas) sharing one
// etcd.
type Store struct {
	client      *clientv3.Client
	prefix      string
	transformer value.Transformer
	limits      Limits
	retention   time.Duration
	chunkSize   int
	// objects holds the plan parts, outputs and finished logs; nil: etcd
	// does.
	objects *objectstore.Store
	compact compactions
	uploads *uploadSlots

	mu       sync.Mutex
	leases   map[string]clientv3.LeaseID // run base key -> lease
	logMetas map[string]cachedLogMeta    // log meta key -> last known meta

	usage logUsage

	// sessionMu guards sess, whose lease holds this store's followers' keys.
	sessionMu sync.Mutex
	sess      *concurrency.Session
}

// New returns a Store that keeps artifacts through client, configured by opts.
func New(client *clientv3.Client, opts Options) *Store {
	s := &Store{
		client:      client,
		prefix:      opts.Prefix,
		transformer: opts.Transformer,
		limits:      opts.Limits.withDefaults(),
		retention:   opts.Retention,
		chunkSize:   opts.ChunkSize,
		objects:     opts.Objects,
		leases:      map[string]clientv3.LeaseID{},
		logMetas:    map[string]cachedLogMeta{},
		compact:     compactions{queue: make(chan logRef, 1024)},
		uploads:     newUploadSlots(),
	}
	if s.prefix == "" {
		s.prefix = defaultPrefix
	}
	if s.prefix[len(s.prefix)-1] != '/' {
		s.prefix += "/"
	}
	if s.transformer == nil {
		s.transformer = identityTransformer{}
	}
	if s.retention <= 0 {
		s.retention = defaultRetention
	}
	if s.chunkSize <= 0 {
		s.chunkSize = defaultChunkSize
	}
	if s.chunkSize > maxChunkSize {
		s.chunkSize = maxChunkSize
	}
	return s
}

// ErrNotFound is returned, wrapped, when an artifact or a log does not exist.
// Test for it with errors.Is.
var ErrNotFound = errors.New("artifact not found")

// ErrLogClosed is returned, wrapped, by AppendLog when the log has been closed
// with CloseLog.
var ErrLogClosed = errors.New("log is closed")

// ErrTooLarge is returned, wrapped, by Put when a plan file exceeds its size
// limit. Plan files are never truncated, because a truncated plan file cannot
// be applied.
var ErrTooLarge = errors.New("artifact exceeds its size limit")

// TruncationMarker is appended, formatted with the limit in bytes (for example
// fmt.Sprintf(TruncationMarker, limit)), to an artifact or a log whose content
// exceeded its size limit. Everything beyond the limit is dropped.
const TruncationMarker = "\n[terrarun: truncated: this artifact exceeded its size limit of %d bytes]\n"

func marker(limit int64) []byte { return []byte(fmt.Sprintf(TruncationMarker, limit)) }

// identityTransformer stores values unchanged.
type identityTransformer struct{}

func (identityTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}

func (identityTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}

// seal transforms data for storage under key.
func (s *Store) seal(ctx context.Context, key string, data []byte) (string, error) {
	out, err := s.transformer.TransformToStorage(ctx, data, value.DefaultContext(key))
	if err != nil {
		return "", fmt.Errorf("artifacts: transforming %s for storage: %w", key, err)
	}
	return string(out), nil
}

// unseal transforms a value read from key back.
func (s *Store) unseal(ctx context.Context, key string, data []byte) ([]byte, error) {
	out, _, err := s.transformer.TransformFromStorage(ctx, data, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("artifacts: transforming %s from storage: %w", key, err)
	}
	return out, nil
}

// runBase returns the key prefix of every key of run, ending in "/".
func (s *Store) runBase(run RunRef) string {
	return s.prefix + url.PathEscape(run.Namespace) + "/" + url.PathEscape(run.Name) + "/" + url.PathEscape(run.UID) + "/"
}

func newGeneration() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("artifacts: generating a generation ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

// runLeaseID is the ID of the lease of the run whose keys start with base: a
// hash of base, which holds the run's UID, so that every writer of the run,
// on any replica, grants or finds the same lease without a key to record it.
// etcd's own IDs begin with its member's ID, and a collision of two runs'
// IDs has the odds of a 63-bit hash's.
func runLeaseID(base string) clientv3.LeaseID {
	sum := sha256.Sum256([]byte(base))
	return clientv3.LeaseID(max(int64(binary.BigEndian.Uint64(sum[:8])>>1), 1))
}

// lease returns the lease of the run whose keys start with base, granting it
// on first use; a writer that finds it granted by another uses it.
func (s *Store) lease(ctx context.Context, base string) (clientv3.LeaseID, error) {
	s.mu.Lock()
	id, ok := s.leases[base]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	id = runLeaseID(base)
	ttl := int64(math.Ceil(s.retention.Seconds()))
	_, err := clientv3.RetryLeaseClient(s.client).LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{ID: int64(id), TTL: ttl})
	if err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseExist) {
		return 0, fmt.Errorf("artifacts: granting the lease of %s: %w", base, err)
	}
	s.mu.Lock()
	if len(s.leases) >= cacheMaxEntries {
		clear(s.leases)
	}
	s.leases[base] = id
	s.mu.Unlock()
	return id, nil
}

func (s *Store) forgetLease(base string, id clientv3.LeaseID) {
	s.mu.Lock()
	if cur, ok := s.leases[base]; ok && (id == 0 || cur == id) {
		delete(s.leases, base)
	}
	s.mu.Unlock()
}

// revokeQuietly revokes a lease on a best-effort basis, also when ctx is
// already cancelled; etcd expires it anyway.
func (s *Store) revokeQuietly(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = s.client.Revoke(rctx, id)
}

// DeleteRun removes every key of run (a prefix delete) and revokes the run's
// lease. It is not an error if the run has no artifacts.
func (s *Store) DeleteRun(ctx context.Context, run RunRef) error {
	if err := run.validate(); err != nil {
		return err
	}
	base := s.runBase(run)
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(base+"lease"),
		clientv3.OpDelete(base, clientv3.WithPrefix()),
		clientv3.OpDelete(s.usageRunPrefix(run), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return fmt.Errorf("artifacts: deleting artifacts of run %s: %w", run, err)
	}
	s.forgetLease(base, 0)
	s.forgetRunUsage(run)
	if s.objects != nil {
		// No meta names them any more.
		if err := s.deleteRunObjects(ctx, run); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for k := range s.logMetas {
		if len(k) >= len(base) && k[:len(base)] == base {
			delete(s.logMetas, k)
		}
	}
	s.mu.Unlock()
	leases := []clientv3.LeaseID{runLeaseID(base)}
	// A run first written by an older server has its lease's ID under its
	// lease key.
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if n, perr := strconv.ParseInt(string(kvs[0].Value), 16, 64); perr == nil {
			leases = append(leases, clientv3.LeaseID(n))
		}
	}
	for _, id := range leases {
		if _, err := s.client.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
			return fmt.Errorf("artifacts: revoking the lease of run %s: %w", run, err)
		}
	}
	return nil
}
