// Package objectstore keeps terrarun's artifacts in an S3-compatible object
// store (AWS S3, MinIO, Ceph, versitygw, ...), through minio-go, encrypted
// on the client: every object is sealed with AES-256-GCM under a data key
// of its own, which a key of the Keyring wraps; the object's metadata holds
// the wrapped data key and the id of the key that wrapped it. Objects are
// sealed in segments, so that a range (the last lines of a finished log) is
// read and authenticated without the rest, and bound to their names, so that
// none can be moved, cut or swapped in the bucket without failing
// authentication (ErrTampered).
package objectstore
