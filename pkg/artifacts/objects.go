package artifacts

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// With an object store (Options.Objects), the plan parts and the outputs
// are objects of it, and etcd keeps their metas only: each meta names its
// object (artifactMeta.Object). The object is written first and its meta
// second, so that no meta names an object that is not stored; an object
// whose meta was never written, or was replaced, is deleted by the upload
// that wrote it, or with its run. Logs stay in etcd while their stage
// writes them (logobjects.go).

// maxObjectUploads bounds the objects being written at once, by uploads
// and log moves together: each holds a buffer of one part (8 MiB).
const maxObjectUploads = 16

// uploadSlots bounds the object uploads in flight: one per run, and
// maxObjectUploads in all.
type uploadSlots struct {
	all  chan struct{}
	mu   sync.Mutex
	runs map[string]chan struct{} // by run UID, while one of its uploads waits or runs
	refs map[string]int
}

func newUploadSlots() *uploadSlots {
	return &uploadSlots{all: make(chan struct{}, maxObjectUploads), runs: map[string]chan struct{}{}, refs: map[string]int{}}
}

// acquire waits for run's turn and a free slot, or ctx's end; release gives
// them back.
func (u *uploadSlots) acquire(ctx context.Context, run string) (release func(), err error) {
	u.mu.Lock()
	ch, ok := u.runs[run]
	if !ok {
		ch = make(chan struct{}, 1)
		u.runs[run] = ch
	}
	u.refs[run]++
	u.mu.Unlock()
	unref := func() {
		u.mu.Lock()
		if u.refs[run]--; u.refs[run] == 0 {
			delete(u.refs, run)
			delete(u.runs, run)
		}
		u.mu.Unlock()
	}
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
	select {
	case u.all <- struct{}{}:
	case <-ctx.Done():
		<-ch
		unref()
		return nil, ctx.Err()
	}
	return func() {
		<-u.all
		<-ch
		unref()
	}, nil
}

// objectPrefix is the object name prefix of run's artifacts.
func objectPrefix(run RunRef) string {
	return "runs/" + url.PathEscape(run.Namespace) + "/" + url.PathEscape(run.Name) + "/" + url.PathEscape(run.UID) + "/"
}

// ErrDigestMismatch is wrapped by the error of an upload whose part does not
// hash to the digest its sender declared for it (WithDigest).
var ErrDigestMismatch = errors.New("the part does not hash to its declared digest")

// declaredPart is a part of an upload whose sender declared its SHA-256.
type declaredPart struct {
	io.Reader
	sha256 string // "sha256:<hex>"
}

// WithDigest declares the digest of the part r holds, "sha256:<hex>": in
// the object store, the part is stored under a name made of it (its
// content's address), and refused when its bytes hash otherwise.
func WithDigest(r io.Reader, sha256 string) io.Reader {
	return &declaredPart{Reader: r, sha256: sha256}
}

// readPartToObject stores one part of an upload as an object, as readPart
// stores it in etcd chunks: within the kind's limit, the rest dropped and
// TruncationMarker appended, or refused for a plan file. A part whose
// digest was declared (WithDigest) is stored under its content's address,
// <kind>/sha256-<hex>, so that an upload retried after the object store
// failed writes the same object again rather than another; others, and a
// declared part cut at the limit, under the meta's generation.
func (u *upload) readPartToObject(p uploadPart, limit int64, r io.Reader) (uploadPart, error) {
	name := objectPrefix(u.run) + string(p.kind) + "/" + p.meta.Generation
	declared, isDeclared := r.(*declaredPart)
	if isDeclared {
		hexDigest, ok := strings.CutPrefix(declared.sha256, "sha256:")
		if !ok || len(hexDigest) != 64 {
			return uploadPart{}, fmt.Errorf("%w: %s of run %s declares %q, not sha256:<64 hex digits>", ErrDigestMismatch, p.kind, u.run, declared.sha256)
		}
		name = objectPrefix(u.run) + string(p.kind) + "/sha256-" + hexDigest
	}
	lr := &limitedPart{r: r, limit: limit, kind: p.kind, run: u.run, h: sha256.New(), ctx: u.ctx}
	if err := u.s.objects.Put(u.ctx, name, lr); err != nil {
		if lr.err != nil {
			return uploadPart{}, lr.err
		}
		return uploadPart{}, fmt.Errorf("artifacts: storing %s of run %s in the object store: %w", p.kind, u.run, err)
	}
	p.meta.Object, p.meta.Size, p.meta.SHA256, p.meta.Truncated = name, lr.n, hashString(lr.h), lr.truncated
	mismatch := isDeclared && !lr.truncated && p.meta.SHA256 != declared.sha256
	// An object whose bytes are not its address's goes with the upload.
	u.objects = append(u.objects, uploadObject{name, isDeclared && !mismatch})
	if mismatch {
		return uploadPart{}, fmt.Errorf("%w: %s of run %s hashes to %s, its sender declared %s", ErrDigestMismatch, p.kind, u.run, p.meta.SHA256, declared.sha256)
	}
	return p, nil
}

// limitedPart reads a part to its end, returning at most limit bytes and
// then the truncation marker, and hashes what it returns.
type limitedPart struct {
	r         io.Reader
	ctx       context.Context
	limit     int64
	kind      Kind
	run       RunRef
	h         hash.Hash
	n         int64
	truncated bool
	tail      []byte // the marker, still to return
	err       error  // why reading stopped, other than the object store
}

func (l *limitedPart) Read(p []byte) (int, error) {
	if len(l.tail) > 0 {
		n := copy(p, l.tail)
		l.tail = l.tail[n:]
		l.h.Write(p[:n])
		l.n += int64(n)
		return n, nil
	}
	if l.truncated {
		return 0, io.EOF
	}
	if err := l.ctx.Err(); err != nil {
		l.err = err
		return 0, err
	}
	n, err := l.r.Read(p)
	if err != nil && err != io.EOF {
		l.err = fmt.Errorf("artifacts: reading %s of run %s: %w", l.kind, l.run, err)
		return 0, l.err
	}
	if l.n+int64(n) > l.limit {
		if l.kind == PlanFile {
			l.err = fmt.Errorf("%w: the plan file of run %s is larger than the limit of %d bytes (%d MiB); raise the plan file limit (artifacts.Limits.PlanFile, set from the server's configuration) to store it", ErrTooLarge, l.run, l.limit, l.limit>>20)
			return 0, l.err
		}
		n = int(l.limit - l.n)
		l.truncated = true
		l.tail = marker(l.limit)
		// The rest is read, so that a writer on the other side of a pipe
		// does not block.
		if derr := drain(l.ctx, l.r, make([]byte, 32<<10)); derr != nil {
			l.err = fmt.Errorf("artifacts: reading %s of run %s: %w", l.kind, l.run, derr)
			return 0, l.err
		}
		err = nil
	}
	l.h.Write(p[:n])
	l.n += int64(n)
	if n == 0 && err == nil && l.truncated {
		return l.Read(p)
	}
	return n, err
}

// deleteObjects deletes objects that no meta names (any more), logging
// what it cannot delete: the run's deletion or the sweep gets them.
func (s *Store) deleteObjects(ctx context.Context, names []string) {
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, name := range names {
		if err := s.objects.Delete(ctx, name); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to delete an artifact object no meta names; it goes with its run", "object", name)
		}
	}
}

// deleteRunObjects deletes every object of run.
func (s *Store) deleteRunObjects(ctx context.Context, run RunRef) error {
	var names []string
	if err := s.objects.List(ctx, objectPrefix(run), func(name string, _ time.Time) error {
		names = append(names, name)
		return nil
	}); err != nil {
		return fmt.Errorf("artifacts: listing the objects of run %s: %w", run, err)
	}
	for _, name := range names {
		if err := s.objects.Delete(ctx, name); err != nil {
			return fmt.Errorf("artifacts: deleting the objects of run %s: %w", run, err)
		}
	}
	return nil
}

// getObject reads the artifact that meta m names in the object store, and
// fails at its end unless its bytes hash to the meta's digest.
func (s *Store) getObject(ctx context.Context, what string, m artifactMeta) (io.ReadCloser, error) {
	rc, _, err := s.objects.Get(ctx, m.Object, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("artifacts: reading %s from the object store: %w", what, err)
	}
	return &verifiedObject{rc: rc, what: what, meta: m, h: sha256.New()}, nil
}

// verifiedObject hashes an object as it is read, and fails at its end when
// it does not hash to its meta's digest: the digest checks hold wherever a
// part is stored.
type verifiedObject struct {
	rc   io.ReadCloser
	what string
	meta artifactMeta
	h    hash.Hash
	n    int64
}

func (v *verifiedObject) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if got := hashString(v.h); got != v.meta.SHA256 || v.n != v.meta.Size {
			return n, fmt.Errorf("artifacts: %s is corrupt: its object %s hashes to %s (%d bytes), meta says %s (%d bytes)", v.what, v.meta.Object, got, v.n, v.meta.SHA256, v.meta.Size)
		}
	}
	if err != nil && err != io.EOF {
		err = fmt.Errorf("artifacts: reading %s from the object store: %w", v.what, err)
	}
	return n, err
}

func (v *verifiedObject) Close() error { return v.rc.Close() }

const (
	// orphanSweepInterval is how often the objects of runs gone from etcd
	// are looked for.
	orphanSweepInterval = time.Hour
	// orphanGrace is how old an object of a run without keys in etcd must
	// be to be deleted: an upload writes its objects before the keys that
	// name them, and takes far less.
	orphanGrace = time.Hour
)

// SweepOrphans deletes the objects of runs that have no key in etcd any
// more, and that are older than grace: a run whose deletion failed half-way
// (its keys went first), or whose artifacts' lease expired, leaves them. It
// returns how many objects it deleted.
func (s *Store) SweepOrphans(ctx context.Context, grace time.Duration) (int, error) {
	if s.objects == nil {
		return 0, nil
	}
	deleted := 0
	var run string // the run prefix of names, runs/<ns>/<name>/<uid>/
	var names []string
	young := false
	flush := func() error {
		defer func() { run, names, young = "", nil, false }()
		if run == "" || young {
			return nil
		}
		resp, err := s.client.Get(ctx, s.prefix+strings.TrimPrefix(run, "runs/"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("artifacts: looking for the keys of %s: %w", run, err)
		}
		if resp.Count > 0 {
			return nil
		}
		for _, name := range names {
			if err := s.objects.Delete(ctx, name); err != nil {
				return err
			}
			deleted++
		}
		return nil
	}
	now := time.Now()
	err := s.objects.List(ctx, "runs/", func(name string, modified time.Time) error {
		parts := strings.SplitN(name, "/", 5)
		if len(parts) < 5 {
			return nil // not a run's object
		}
		prefix := strings.Join(parts[:4], "/") + "/"
		if prefix != run {
			if err := flush(); err != nil {
				return err
			}
			run = prefix
		}
		names = append(names, name)
		young = young || now.Sub(modified) < grace
		return nil
	})
	if err == nil {
		err = flush()
	}
	return deleted, err
}
