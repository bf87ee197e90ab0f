package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Meta describes a stored artifact.
type Meta struct {
	// Size is the number of bytes stored, after truncation (including the
	// truncation marker, if any).
	Size int64
	// SHA256 is "sha256:<hex>" of the stored bytes.
	SHA256 string
	// Truncated reports that the input exceeded the size limit; the stored
	// content then ends with TruncationMarker.
	Truncated bool
}

// artifactMeta is the stored meta of an artifact.
type artifactMeta struct {
	Generation string `json:"generation"`
	Chunks     int64  `json:"chunks"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	Truncated  bool   `json:"truncated,omitempty"`
	// Object names the object that holds the artifact in the object store
	// (Options.Objects); empty when its chunks are in etcd.
	Object string `json:"object,omitempty"`
}

func (m artifactMeta) public() Meta {
	return Meta{Size: m.Size, SHA256: m.SHA256, Truncated: m.Truncated}
}

type artifactKeys struct {
	dir  string // <run><kind>/
	meta string
}

func (k artifactKeys) genPrefix(gen string) string { return k.dir + gen + "/" }

func chunkKey(genPrefix string, i int64) string { return fmt.Sprintf("%s%010d", genPrefix, i) }

func (s *Store) artifactKeys(run RunRef, kind Kind) (artifactKeys, int64, error) {
	if err := run.validate(); err != nil {
		return artifactKeys{}, 0, err
	}
	limit, err := s.limits.forKind(kind)
	if err != nil {
		return artifactKeys{}, 0, err
	}
	dir := s.runBase(run) + string(kind) + "/"
	return artifactKeys{dir: dir, meta: dir + "meta"}, limit, nil
}

// Put stores the content of r as the artifact kind of run, replacing any
// earlier artifact of that kind atomically: the chunks are written under a new
// generation, the meta key is swapped in a transaction, and the old generation
// is deleted afterwards. r is read in chunks of Options.ChunkSize and never
// held in memory as a whole; ctx is checked between chunks and bounds every
// etcd request (a Read blocked inside r cannot be interrupted by ctx).
//
// Content beyond the kind's limit is dropped (r is still read to its end, so
// that a writer on the other side of a pipe does not block) and
// TruncationMarker is appended. A PlanFile over its limit is an error wrapping
// ErrTooLarge instead, and nothing is stored. If Put fails, the earlier
// artifact, if any, stays in place.
func (s *Store) Put(ctx context.Context, run RunRef, kind Kind, r io.Reader) (Meta, error) {
	done := false
	metas, err := s.PutAll(ctx, run, func() (Kind, io.Reader, error) {
		if done {
			return "", nil, io.EOF
		}
		done = true
		return kind, r, nil
	})
	return metas[kind], err
}

// PutAll stores several artifacts of run, each as Put stores one, and
// replaces them together: their metas are swapped in one transaction, with
// the last chunk of each (most plan parts are one chunk, so a plan of four
// parts costs one transaction). Chunks before a part's last are written
// ahead, as is a last chunk that would make that transaction carry more
// than maxCommitBytes of chunks. next returns the parts one at a time, and
// io.EOF after the last; a part's reader is read to its end before next is
// called again, as a multipart reader's parts must be. A kind may appear
// once. If PutAll fails, every earlier artifact stays in place.
func (s *Store) PutAll(ctx context.Context, run RunRef, next func() (Kind, io.Reader, error)) (map[Kind]Meta, error) {
	if err := run.validate(); err != nil {
		return nil, err
	}
	base := s.runBase(run)
	leaseID, err := s.lease(ctx, base)
	if err != nil {
		return nil, err
	}
	if s.objects != nil {
		// Each object upload holds a buffer of a part's size (8 MiB): one
		// upload of a run at a time, whatever its stage's code sends.
		release, err := s.uploads.acquire(ctx, run.UID)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	u := &upload{s: s, ctx: ctx, run: run, base: base, lease: leaseID, buf: make([]byte, s.chunkSize)}
	metas, err := u.read(next)
	if err != nil {
		u.cleanup()
		return nil, err
	}
	resp, err := u.commit()
	if err != nil {
		u.cleanup()
		return nil, err
	}
	// The generations replaced go in one more transaction, and their
	// objects after it.
	var deletes []clientv3.Op
	var replaced []string
	for i, p := range u.parts {
		kvs := resp.Responses[2*i].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue
		}
		old, err := s.decodeArtifactMeta(ctx, p.keys.meta, kvs[0].Value)
		if err != nil {
			// The new artifact is in place; the old chunks expire with the lease.
			klog.FromContext(ctx).Error(err, "Failed to read a replaced artifact's meta; its chunks expire with the run's lease", "run", run.String(), "kind", string(p.kind))
			continue
		}
		if old.Generation != "" && old.Generation != p.meta.Generation && old.Chunks > 0 {
			deletes = append(deletes, clientv3.OpDelete(p.keys.genPrefix(old.Generation), clientv3.WithPrefix()))
		}
		if old.Object != "" && old.Object != p.meta.Object && s.objects != nil {
			replaced = append(replaced, old.Object)
		}
	}
	if len(replaced) > 0 {
		defer s.deleteObjects(ctx, replaced)
	}
	if len(deletes) > 0 {
		if _, err := s.client.Txn(ctx).Then(deletes...).Commit(); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to delete replaced artifacts; they expire with the run's lease", "run", run.String(), "kinds", u.kinds())
		}
	}
	return metas, nil
}

// maxCommitBytes bounds the chunks that PutAll commits with the metas, well
// under etcd's request limit (1.5 MiB by default); a single chunk of
// Options.ChunkSize is always carried.
const maxCommitBytes = 1 << 20

// upload is the state of one PutAll.
type upload struct {
	s     *Store
	ctx   context.Context
	run   RunRef
	base  string
	lease clientv3.LeaseID
	buf   []byte
	parts []uploadPart
	// pending are last chunks held for the commit, oldest first.
	pending      []chunk
	pendingBytes int
	// written reports that a chunk was written ahead of the commit, under
	// one of prefixes (every part's new generation, as it is started).
	written  bool
	prefixes []string
	// objects are the objects written for the parts (Options.Objects).
	objects []uploadObject
}

// uploadPart is one artifact of an upload.
type uploadPart struct {
	kind      Kind
	keys      artifactKeys
	genPrefix string
	meta      artifactMeta
	sealed    string // the sealed meta
}

// chunk is a chunk to write: its key and sealed value.
type chunk struct{ key, value string }

// read stores every part's chunks but the ones held for the commit.
func (u *upload) read(next func() (Kind, io.Reader, error)) (map[Kind]Meta, error) {
	metas := map[Kind]Meta{}
	for {
		kind, r, err := next()
		if err == io.EOF {
			return metas, nil
		}
		if err != nil {
			return nil, err
		}
		if _, dup := metas[kind]; dup {
			return nil, fmt.Errorf("artifacts: %s of run %s is given twice in one upload", kind, u.run)
		}
		p, err := u.readPart(kind, r)
		if err != nil {
			return nil, err
		}
		u.parts = append(u.parts, p)
		metas[kind] = p.meta.public()
	}
}

// readPart reads one part, holding its last chunk for the commit.
func (u *upload) readPart(kind Kind, r io.Reader) (uploadPart, error) {
	keys, limit, err := u.s.artifactKeys(u.run, kind)
	if err != nil {
		return uploadPart{}, err
	}
	gen, err := newGeneration()
	if err != nil {
		return uploadPart{}, err
	}
	p := uploadPart{kind: kind, keys: keys, genPrefix: keys.genPrefix(gen)}
	if u.s.objects != nil {
		p.meta.Generation = gen
		if p, err = u.readPartToObject(p, limit, r); err != nil {
			return uploadPart{}, err
		}
		return u.sealMeta(p)
	}
	u.prefixes = append(u.prefixes, p.genPrefix)
	h := sha256.New()
	var stored, chunks int64
	truncated := false
	var last *chunk
	for !truncated {
		if err := u.ctx.Err(); err != nil {
			return uploadPart{}, err
		}
		n, rerr := io.ReadFull(r, u.buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return uploadPart{}, fmt.Errorf("artifacts: reading %s of run %s: %w", kind, u.run, rerr)
		}
		if n > 0 {
			data := u.buf[:n]
			if stored+int64(n) > limit {
				if kind == PlanFile {
					return uploadPart{}, fmt.Errorf("%w: the plan file of run %s is larger than the limit of %d bytes (%d MiB); raise the plan file limit (artifacts.Limits.PlanFile, set from the server's configuration) to store it", ErrTooLarge, u.run, limit, limit>>20)
				}
				keep := limit - stored
				data = append(append(make([]byte, 0, keep+int64(len(TruncationMarker))+20), u.buf[:keep]...), marker(limit)...)
				truncated = true
			}
			if last != nil {
				if err := u.put(*last); err != nil {
					return uploadPart{}, fmt.Errorf("artifacts: writing %s of run %s: %w", kind, u.run, err)
				}
			}
			key := chunkKey(p.genPrefix, chunks)
			sealed, err := u.s.seal(u.ctx, key, data)
			if err != nil {
				return uploadPart{}, err
			}
			last = &chunk{key, sealed}
			h.Write(data)
			stored += int64(len(data))
			chunks++
		}
		if rerr != nil { // io.EOF or io.ErrUnexpectedEOF: the end of r
			break
		}
	}
	if truncated {
		if err := drain(u.ctx, r, u.buf); err != nil {
			return uploadPart{}, fmt.Errorf("artifacts: reading %s of run %s: %w", kind, u.run, err)
		}
	}
	if last != nil {
		if err := u.hold(*last); err != nil {
			return uploadPart{}, fmt.Errorf("artifacts: writing %s of run %s: %w", kind, u.run, err)
		}
	}
	p.meta = artifactMeta{Generation: gen, Chunks: chunks, Size: stored, SHA256: hashString(h), Truncated: truncated}
	return u.sealMeta(p)
}

// sealMeta seals the meta of p, to be committed.
func (u *upload) sealMeta(p uploadPart) (uploadPart, error) {
	raw, err := json.Marshal(p.meta)
	if err != nil {
		return uploadPart{}, err
	}
	if p.sealed, err = u.s.seal(u.ctx, p.keys.meta, raw); err != nil {
		return uploadPart{}, err
	}
	return p, nil
}

// hold keeps c for the commit, first writing the oldest held chunks if the
// commit would carry more than maxCommitBytes.
func (u *upload) hold(c chunk) error {
	for len(u.pending) > 0 && u.pendingBytes+len(c.value) > maxCommitBytes {
		if err := u.put(u.pending[0]); err != nil {
			return err
		}
		u.pendingBytes -= len(u.pending[0].value)
		u.pending = u.pending[1:]
	}
	u.pending = append(u.pending, c)
	u.pendingBytes += len(c.value)
	return nil
}

// put writes c ahead of the commit.
func (u *upload) put(c chunk) error {
	first := !u.written
	u.written = true
	_, err := u.s.client.Put(u.ctx, c.key, c.value, clientv3.WithLease(u.lease))
	if isLeaseNotFound(err) {
		// The cached lease expired or was revoked by DeleteRun on another
		// replica. Before the first chunk nothing is lost: retry with a new
		// lease.
		u.s.forgetLease(u.base, u.lease)
		if first {
			if u.lease, err = u.s.lease(u.ctx, u.base); err == nil {
				_, err = u.s.client.Put(u.ctx, c.key, c.value, clientv3.WithLease(u.lease))
			}
		}
	}
	return err
}

// commit swaps every part's meta in, with the held chunks, in one
// transaction. Its responses are, for each part in order, the Get of the
// meta being replaced (the Get runs before the Put) and the Put.
func (u *upload) commit() (*clientv3.TxnResponse, error) {
	swap := func() (*clientv3.TxnResponse, error) {
		ops := make([]clientv3.Op, 0, 2*len(u.parts)+len(u.pending))
		for _, p := range u.parts {
			ops = append(ops, clientv3.OpGet(p.keys.meta), clientv3.OpPut(p.keys.meta, p.sealed, clientv3.WithLease(u.lease)))
		}
		for _, c := range u.pending {
			ops = append(ops, clientv3.OpPut(c.key, c.value, clientv3.WithLease(u.lease)))
		}
		return u.s.client.Txn(u.ctx).Then(ops...).Commit()
	}
	resp, err := swap()
	if isLeaseNotFound(err) {
		u.s.forgetLease(u.base, u.lease)
		if !u.written { // no chunk was written apart: nothing was lost with the lease
			if u.lease, err = u.s.lease(u.ctx, u.base); err == nil {
				resp, err = swap()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("artifacts: committing %s of run %s: %w", u.kinds(), u.run, err)
	}
	return resp, nil
}

// kinds names the upload's parts.
func (u *upload) kinds() string {
	names := make([]string, len(u.parts))
	for i, p := range u.parts {
		names[i] = string(p.kind)
	}
	return strings.Join(names, ", ")
}

// cleanup deletes the chunks written ahead of a commit that did not happen,
// and the objects.
func (u *upload) cleanup() {
	if u.s.objects != nil {
		u.s.deleteObjects(u.ctx, u.unnamed())
	}
	if !u.written {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
	defer cancel()
	for _, prefix := range u.prefixes {
		if _, err := u.s.client.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			klog.FromContext(u.ctx).Error(err, "Failed to delete the chunks of an unfinished artifact; they expire with the run's lease", "key", prefix)
		}
	}
}

// uploadObject is an object an upload wrote, and whether it is named by
// its content's address.
type uploadObject struct {
	name      string
	addressed bool
}

// unnamed returns the objects of a failed upload that nothing else can
// name: those of its own generation. An object under its content's address
// may be the very one an upload of the same bytes stored, or is storing on
// another replica, and stays; it goes with its run.
func (u *upload) unnamed() []string {
	var out []string
	for _, o := range u.objects {
		if !o.addressed {
			out = append(out, o.name)
		}
	}
	return out
}

// drain reads r to its end, checking ctx between reads.
func drain(ctx context.Context, r io.Reader, buf []byte) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := r.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func hashString(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func (s *Store) decodeArtifactMeta(ctx context.Context, key string, v []byte) (artifactMeta, error) {
	raw, err := s.unseal(ctx, key, v)
	if err != nil {
		return artifactMeta{}, err
	}
	var m artifactMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return artifactMeta{}, fmt.Errorf("artifacts: decoding %s: %w", key, err)
	}
	return m, nil
}

// readArtifactMeta returns the meta of an artifact and the revision it was read at.
func (s *Store) readArtifactMeta(ctx context.Context, run RunRef, kind Kind, keys artifactKeys) (artifactMeta, int64, error) {
	resp, err := s.client.Get(ctx, keys.meta)
	if err != nil {
		return artifactMeta{}, 0, fmt.Errorf("artifacts: reading %s of run %s: %w", kind, run, err)
	}
	if len(resp.Kvs) == 0 {
		return artifactMeta{}, 0, fmt.Errorf("%w: no %s for run %s", ErrNotFound, kind, run)
	}
	m, err := s.decodeArtifactMeta(ctx, keys.meta, resp.Kvs[0].Value)
	return m, resp.Header.Revision, err
}

// Stat returns the meta of the artifact kind of run, or an error wrapping
// ErrNotFound.
func (s *Store) Stat(ctx context.Context, run RunRef, kind Kind) (Meta, error) {
	keys, _, err := s.artifactKeys(run, kind)
	if err != nil {
		return Meta{}, err
	}
	m, _, err := s.readArtifactMeta(ctx, run, kind, keys)
	if err != nil {
		return Meta{}, err
	}
	return m.public(), nil
}

// Get returns a reader of the artifact kind of run and its meta, or an error
// wrapping ErrNotFound. The reader fetches chunks lazily, a few at a time, with
// ctx, so ctx must stay alive while reading; cancelling it makes Read fail. At
// the end of the stream the reader verifies the SHA-256 of the content and
// fails if it does not match. If the artifact is replaced while being read, the
// reader goes on with the old content from etcd's history, or fails if that has
// been compacted. Close the reader when done.
func (s *Store) Get(ctx context.Context, run RunRef, kind Kind) (io.ReadCloser, Meta, error) {
	keys, _, err := s.artifactKeys(run, kind)
	if err != nil {
		return nil, Meta{}, err
	}
	m, rev, err := s.readArtifactMeta(ctx, run, kind, keys)
	if err != nil {
		return nil, Meta{}, err
	}
	if m.Object != "" {
		if s.objects == nil {
			return nil, Meta{}, fmt.Errorf("artifacts: %s of run %s is in the object store (object %s), and this server has none configured (--artifact-store)", kind, run, m.Object)
		}
		rc, err := s.getObject(ctx, fmt.Sprintf("%s of run %s", kind, run), m)
		return rc, m.public(), err
	}
	batch := int64(readBatchBytes / s.chunkSize)
	if batch < 1 {
		batch = 1
	}
	return &artifactReader{
		s:         s,
		ctx:       ctx,
		what:      fmt.Sprintf("%s of run %s", kind, run),
		genPrefix: keys.genPrefix(m.Generation),
		meta:      m,
		rev:       rev,
		batch:     batch,
		h:         sha256.New(),
	}, m.public(), nil
}

// artifactReader streams the chunks of one generation of an artifact.
type artifactReader struct {
	s         *Store
	ctx       context.Context
	what      string
	genPrefix string
	meta      artifactMeta
	rev       int64 // revision at which the meta was read
	batch     int64

	next    int64    // index of the next chunk to fetch
	pending [][]byte // fetched chunks not yet returned
	cur     []byte   // rest of the chunk being returned
	h       hash.Hash
	err     error
}

func (a *artifactReader) Read(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	for len(a.cur) == 0 {
		if len(a.pending) > 0 {
			a.cur, a.pending = a.pending[0], a.pending[1:]
			continue
		}
		if a.next >= a.meta.Chunks {
			if got := hashString(a.h); got != a.meta.SHA256 {
				a.err = fmt.Errorf("artifacts: %s is corrupt: content hashes to %s, meta says %s", a.what, got, a.meta.SHA256)
			} else {
				a.err = io.EOF
			}
			return 0, a.err
		}
		if err := a.fetch(); err != nil {
			a.err = err
			return 0, err
		}
	}
	n := copy(p, a.cur)
	a.h.Write(a.cur[:n])
	a.cur = a.cur[n:]
	return n, nil
}

// fetch reads the next batch of chunks, from the current revision or, if the
// generation has been replaced and deleted meanwhile, from the revision the
// meta was read at.
func (a *artifactReader) fetch() error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	end := min(a.next+a.batch, a.meta.Chunks)
	from, to := chunkKey(a.genPrefix, a.next), chunkKey(a.genPrefix, end)
	resp, err := a.s.client.Get(a.ctx, from, clientv3.WithRange(to))
	if err == nil && int64(len(resp.Kvs)) != end-a.next {
		resp, err = a.s.client.Get(a.ctx, from, clientv3.WithRange(to), clientv3.WithRev(a.rev))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return fmt.Errorf("artifacts: %s was replaced or deleted while being read", a.what)
		}
	}
	if err != nil {
		return fmt.Errorf("artifacts: reading %s: %w", a.what, err)
	}
	if int64(len(resp.Kvs)) != end-a.next {
		return fmt.Errorf("%w: %s was deleted while being read", ErrNotFound, a.what)
	}
	for i, kv := range resp.Kvs {
		key := chunkKey(a.genPrefix, a.next+int64(i))
		if string(kv.Key) != key {
			return fmt.Errorf("artifacts: %s: expected chunk %s, got %s", a.what, key, kv.Key)
		}
		data, err := a.s.unseal(a.ctx, key, kv.Value)
		if err != nil {
			return err
		}
		a.pending = append(a.pending, data)
	}
	a.next = end
	return nil
}

func (a *artifactReader) Close() error {
	if a.err == nil || a.err == io.EOF {
		a.err = errors.New("artifacts: read from a closed reader")
	}
	a.pending, a.cur = nil, nil
	return nil
}
