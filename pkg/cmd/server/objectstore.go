package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore"
)

// ArtifactStoreOptions say where the plan parts and the outputs are kept:
// in etcd with the objects (the default), or in an S3-compatible object
// store, encrypted on the client, with etcd keeping their metas only.
type ArtifactStoreOptions struct {
	// Kind is etcd or s3.
	Kind string
	// Endpoint, Bucket, Prefix, Region, PathStyle, CAFile and
	// CredentialsFile locate the object store (objectstore.Config).
	Endpoint, Bucket, Prefix, Region string
	PathStyle                        bool
	CAFile, CredentialsFile          string
	// EncryptionKeys is the keyring file (objectstore.LoadKeyring); Plaintext
	// stores objects unencrypted instead, only when set explicitly.
	EncryptionKeys string
	Plaintext      bool
	// Migrate moves what etcd holds into the object store at start.
	Migrate bool
}

// AddFlags adds the artifact store flags.
func (o *ArtifactStoreOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kind, "artifact-store", "etcd", "Where plan parts and outputs are kept: etcd (with the objects) or s3 (an S3-compatible object store, encrypted on the client; etcd then keeps their metas, and logs).")
	fs.StringVar(&o.Endpoint, "artifact-store-endpoint", "", "--artifact-store=s3: the object store's URL, https://host[:port] (http:// only on a trusted network).")
	fs.StringVar(&o.Bucket, "artifact-store-bucket", "", "--artifact-store=s3: the bucket.")
	fs.StringVar(&o.Prefix, "artifact-store-prefix", "terrarun", "--artifact-store=s3: the key prefix of every object in the bucket.")
	fs.StringVar(&o.Region, "artifact-store-region", "", "--artifact-store=s3: the bucket's region; empty asks the store.")
	fs.BoolVar(&o.PathStyle, "artifact-store-path-style", false, "--artifact-store=s3: address the bucket in the path (https://host/bucket), as MinIO, Ceph and most stores other than AWS need.")
	fs.StringVar(&o.CAFile, "artifact-store-ca-file", "", "--artifact-store=s3: a CA bundle that verifies the store's certificate; empty: the system's roots.")
	fs.StringVar(&o.CredentialsFile, "artifact-store-credentials-file", "", "--artifact-store=s3: an AWS shared credentials file (profile default), mounted from a Secret. "+
		"Empty: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, then web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), then the instance's role.")
	fs.StringVar(&o.EncryptionKeys, "artifact-encryption-keys", "", "--artifact-store=s3: the file of the keys that encrypt every object (AES-256-GCM), mounted from a Secret: "+
		"primary: <key id>, keys: {<key id>: <base64 of 32 random bytes>}. To rotate, add a key and make it primary; keep the old one while objects it encrypted are kept.")
	fs.BoolVar(&o.Migrate, "artifact-store-migrate", true, "--artifact-store=s3: at start, move into the object store what etcd still holds (plan parts and outputs stored before, finished logs), in the background; "+
		"resumable, it logs what it moved.")
	fs.BoolVar(&o.Plaintext, "artifact-store-plaintext", false, "--artifact-store=s3: store objects unencrypted (plan files and outputs hold secrets: only where the store encrypts them and only terrarun can read the bucket).")
}

// Validate says what is wrong with the flags.
func (o *ArtifactStoreOptions) Validate() []error {
	var errs []error
	switch o.Kind {
	case "etcd":
		if o.Endpoint != "" || o.Bucket != "" || o.EncryptionKeys != "" {
			errs = append(errs, errors.New("--artifact-store-endpoint, --artifact-store-bucket and --artifact-encryption-keys apply to --artifact-store=s3"))
		}
	case "s3":
		if o.Endpoint == "" || o.Bucket == "" {
			errs = append(errs, errors.New("--artifact-store=s3 needs --artifact-store-endpoint and --artifact-store-bucket"))
		}
		if o.EncryptionKeys == "" && !o.Plaintext {
			errs = append(errs, errors.New("--artifact-store=s3 encrypts every object: give --artifact-encryption-keys (a keys file), or --artifact-store-plaintext to store them unencrypted"))
		}
		if o.EncryptionKeys != "" && o.Plaintext {
			errs = append(errs, errors.New("--artifact-encryption-keys and --artifact-store-plaintext contradict each other: choose one"))
		}
	default:
		errs = append(errs, fmt.Errorf("--artifact-store must be etcd or s3, not %q", o.Kind))
	}
	return errs
}

// objects returns the object store the flags name; nil for etcd.
func (o *ArtifactStoreOptions) objects() (*objectstore.Store, error) {
	if o.Kind != "s3" {
		return nil, nil
	}
	cfg := objectstore.Config{Endpoint: o.Endpoint, Region: o.Region, Bucket: o.Bucket, Prefix: o.Prefix, PathStyle: o.PathStyle,
		CAFile: o.CAFile, CredentialsFile: o.CredentialsFile}
	if !o.Plaintext {
		keys, err := objectstore.LoadKeyring(o.EncryptionKeys)
		if err != nil {
			return nil, fmt.Errorf("--artifact-encryption-keys: %w", err)
		}
		cfg.Keys = keys
	}
	return objectstore.New(cfg)
}

// migrateArtifacts moves what etcd still holds into the object store, again
// a minute after a failure, until it has moved all of it or ctx ends.
func migrateArtifacts(ctx context.Context, store *artifacts.Store) {
	logger := klog.FromContext(ctx)
	ctx, done := context.WithCancel(ctx)
	defer done()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		moved, err := store.MigrateToObjects(ctx)
		if err != nil {
			logger.Error(err, "Moving artifacts from etcd into the object store; going on in a minute", "artifacts", moved.Artifacts, "bytes", moved.Bytes, "logs", moved.Logs)
			return
		}
		logger.Info("Moved what etcd held into the object store", "artifacts", moved.Artifacts, "bytes", moved.Bytes, "logs", moved.Logs)
		done()
	}, time.Minute)
}
