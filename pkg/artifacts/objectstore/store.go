package objectstore

import (
	"context"
	"crypto/cipher"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config is where the object store is and how to reach it.
type Config struct {
	// Endpoint is the store's URL: https://host[:port], or http:// for a
	// store on a trusted network.
	Endpoint string
	// Region is the bucket's region; empty asks the store.
	Region string
	// Bucket holds the artifacts, under Prefix.
	Bucket, Prefix string
	// PathStyle addresses the bucket in the path (https://host/bucket/key)
	// rather than the host name (https://bucket.host/key), as most stores
	// but AWS need.
	PathStyle bool
	// CAFile verifies the store's certificate; empty: the system's roots.
	CAFile string
	// CredentialsFile is an AWS shared credentials file (mounted from a
	// Secret), profile default. Without it the credentials come from the
	// standard environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY),
	// then from web identity (AWS_WEB_IDENTITY_TOKEN_FILE and
	// AWS_ROLE_ARN) or the instance's role.
	CredentialsFile string
	// Keys encrypt the objects; nil stores them as they are.
	Keys *Keyring
}

// Store reads and writes the objects of one bucket and prefix.
type Store struct {
	client         *minio.Client
	bucket, prefix string
	keys           *Keyring
}

// Metadata of encrypted objects (x-amz-meta-*).
const (
	metaKeyID = "Terrarun-Key-Id"
	metaDEK   = "Terrarun-Data-Key"
	metaNonce = "Terrarun-Nonce"
)

// New returns the store cfg describes. It does not reach the store.
func New(cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("the object store endpoint %q must be https://host[:port] (or http://)", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("name the object store's bucket")
	}
	var creds *credentials.Credentials
	if cfg.CredentialsFile != "" {
		if _, err := os.Stat(cfg.CredentialsFile); err != nil {
			return nil, fmt.Errorf("the object store's credentials file: %w", err)
		}
		creds = credentials.NewFileAWSCredentials(cfg.CredentialsFile, "default")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.IAM{}})
	}
	transport, err := minio.DefaultTransport(u.Scheme == "https")
	if err != nil {
		return nil, err
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the object store's CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the object store's CA %s holds no PEM certificate", cfg.CAFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region, BucketLookup: lookup,
		Transport: http.RoundTripper(transport),
	})
	if err != nil {
		return nil, err
	}
	return &Store{client: client, bucket: cfg.Bucket, prefix: strings.Trim(cfg.Prefix, "/"), keys: cfg.Keys}, nil
}

func (s *Store) key(name string) string {
	if s.prefix == "" {
		return name
	}
	return path.Join(s.prefix, name)
}

// Put stores what r holds as the object name, sealed when the store has
// keys, and returns once the store has acknowledged all of it.
func (s *Store) Put(ctx context.Context, name string, r io.Reader) error {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 8 << 20}
	body := r
	if s.keys != nil {
		dek, err := randomBytes(32)
		if err != nil {
			return err
		}
		aead, err := newAEAD(dek)
		if err != nil {
			return err
		}
		base, err := randomBytes(aead.NonceSize())
		if err != nil {
			return err
		}
		wrapNonce, err := randomBytes(aead.NonceSize())
		if err != nil {
			return err
		}
		wrapped := s.keys.keys[s.keys.primary].Seal(wrapNonce, wrapNonce, dek, []byte(s.keys.primary+"\x00"+name))
		opts.UserMetadata = map[string]string{
			metaKeyID: s.keys.primary,
			metaDEK:   base64.StdEncoding.EncodeToString(wrapped),
			metaNonce: base64.StdEncoding.EncodeToString(base),
		}
		body = newSealer(r, aead, base, name)
	}
	if _, err := s.client.PutObject(ctx, s.bucket, s.key(name), body, -1, opts); err != nil {
		return fmt.Errorf("storing object %s in bucket %s: %w", s.key(name), s.bucket, classify(err))
	}
	return nil
}

// ErrNotFound is the error of reading an object that does not exist.
var ErrNotFound = errors.New("no such object")

// ErrUnavailable is wrapped by the errors of requests that the object store
// could not answer (it is down, unreachable, slow or failing): they may be
// retried.
var ErrUnavailable = errors.New("the object store is unavailable")

// classify wraps err with ErrUnavailable when the store did not answer it,
// or answered with a server error.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || minio.ToErrorResponse(err).StatusCode >= 500 {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Object is a stored object, as Get found it.
type Object struct {
	// Size is the size of its plaintext.
	Size int64
	info minio.ObjectInfo
	aead cipher.AEAD
	base []byte
}

// stat returns the object name, and the key to open it with.
func (s *Store) stat(ctx context.Context, name string) (*Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("object %s: %w", s.key(name), ErrNotFound)
		}
		return nil, fmt.Errorf("reading object %s in bucket %s: %w", s.key(name), s.bucket, classify(err))
	}
	o := &Object{Size: info.Size, info: info}
	id := info.UserMetadata[metaKeyID]
	if id == "" {
		if s.keys != nil {
			return nil, fmt.Errorf("object %s: %w (it is not encrypted, and this store encrypts every object)", s.key(name), ErrTampered)
		}
		return o, nil
	}
	if s.keys == nil {
		return nil, fmt.Errorf("object %s is encrypted with key %q, and this server has no keys (--artifact-encryption-keys)", s.key(name), id)
	}
	kek, ok := s.keys.keys[id]
	if !ok {
		return nil, fmt.Errorf("object %s is encrypted with key %q, which the keyring does not hold: add key %q back to the keys file to read it", s.key(name), id, id)
	}
	wrapped, err1 := base64.StdEncoding.DecodeString(info.UserMetadata[metaDEK])
	base, err2 := base64.StdEncoding.DecodeString(info.UserMetadata[metaNonce])
	if err1 != nil || err2 != nil || len(wrapped) < kek.NonceSize() || len(base) != kek.NonceSize() {
		return nil, fmt.Errorf("object %s: %w (its key metadata is malformed)", s.key(name), ErrTampered)
	}
	dek, err := kek.Open(nil, wrapped[:kek.NonceSize()], wrapped[kek.NonceSize():], []byte(id+"\x00"+name))
	if err != nil {
		return nil, fmt.Errorf("object %s: %w (its data key does not open with key %q)", s.key(name), ErrTampered, id)
	}
	if o.aead, err = newAEAD(dek); err != nil {
		return nil, err
	}
	o.base = base
	if o.Size, err = plainSize(info.Size); err != nil {
		return nil, fmt.Errorf("object %s: %w", s.key(name), err)
	}
	return o, nil
}

// Get returns the plaintext of object name from offset off, n bytes of it
// (to the end when n < 0), reading from the store only the segments that
// hold them. A read whose bytes fail authentication fails with ErrTampered.
func (s *Store) Get(ctx context.Context, name string, off, n int64) (io.ReadCloser, *Object, error) {
	o, err := s.stat(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if off < 0 || off > o.Size {
		return nil, nil, fmt.Errorf("offset %d is outside object %s of %d bytes", off, s.key(name), o.Size)
	}
	if n < 0 || off+n > o.Size {
		n = o.Size - off
	}
	opts := minio.GetObjectOptions{}
	// The object read is the one stat described: a concurrent replace
	// fails the read instead of mixing two objects.
	if err := opts.SetMatchETag(o.info.ETag); err != nil {
		return nil, nil, err
	}
	if n == 0 && (o.aead == nil || o.Size > 0) {
		return io.NopCloser(strings.NewReader("")), o, nil
	}
	if n == 0 {
		// An empty encrypted object is one empty sealed segment: opened, so
		// that an object replaced by another empty one fails too.
		body, err := s.client.GetObject(ctx, s.bucket, s.key(name), opts)
		if err != nil {
			return nil, nil, classify(err)
		}
		defer body.Close()
		sealed, err := io.ReadAll(io.LimitReader(body, tagSize+1))
		if err != nil {
			return nil, nil, classify(err)
		}
		if _, err := o.aead.Open(nil, segmentNonce(o.base, 0), sealed, segmentAAD(name, true)); err != nil {
			return nil, nil, fmt.Errorf("object %s: %w", s.key(name), ErrTampered)
		}
		return io.NopCloser(strings.NewReader("")), o, nil
	}
	if o.aead == nil {
		if err := opts.SetRange(off, off+n-1); err != nil {
			return nil, nil, err
		}
		body, err := s.client.GetObject(ctx, s.bucket, s.key(name), opts)
		if err != nil {
			return nil, nil, err
		}
		return body, o, nil
	}
	first, last := off/segmentSize, (off+n-1)/segmentSize
	start, end := first*sealedSeg, min((last+1)*sealedSeg, o.info.Size)-1
	if err := opts.SetRange(start, end); err != nil {
		return nil, nil, err
	}
	body, err := s.client.GetObject(ctx, s.bucket, s.key(name), opts)
	if err != nil {
		return nil, nil, err
	}
	total := uint64((o.info.Size + sealedSeg - 1) / sealedSeg)
	r := &opener{src: body, aead: o.aead, base: o.base, name: name, i: uint64(first), stop: min(uint64(last)+1, total),
		lastIndex: total - 1, skip: off - first*segmentSize, left: n}
	return readCloser{r, body}, o, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Delete removes object name; a missing object is no error.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{}); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("deleting object %s in bucket %s: %w", s.key(name), s.bucket, classify(err))
	}
	return nil
}

// List calls fn with the name and the time of the last change of every
// object under prefix, in order.
func (s *Store) List(ctx context.Context, prefix string, fn func(name string, modified time.Time) error) error {
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if info.Err != nil {
			return fmt.Errorf("listing bucket %s: %w", s.bucket, classify(info.Err))
		}
		name := info.Key
		if s.prefix != "" {
			name = strings.TrimPrefix(name, s.prefix+"/")
		}
		if err := fn(name, info.LastModified); err != nil {
			return err
		}
	}
	return nil
}
