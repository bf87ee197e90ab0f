// Package artifacts stores the artifacts of Terraform runs in the server's own
// etcd: plan files, plan text, redacted plan JSON, snapshots of the planned
// configuration, outputs and the logs of every stage attempt.
//
// Artifacts are kept apart from the API objects, under a key prefix of their
// own (default "/terrarun/artifacts/"), and are written and read directly with
// go.etcd.io/etcd/client/v3. Values are split into chunks (default 256 KiB,
// at most 1 MiB) so that every request stays well under etcd's 1.5 MiB request
// limit, and large artifacts are streamed in both directions rather than held
// in memory.
//
// # Key layout
//
// With <run> = <prefix><namespace>/<name>/<uid>/ (each segment escaped with
// url.PathEscape):
//
//	<run>lease                              etcd lease ID of a run first written by an older server (hex, plain)
//	<run><kind>/meta                        artifact metadata: generation, chunk count, size, sha256
//	<run><kind>/<generation>/<index>        artifact chunk, index zero-padded to 10 digits
//	<run>logs/<stage>/<attempt>/meta        log metadata: chunk count, size, truncated, closed
//	<run>logs/<stage>/<attempt>/c/<seq>     log chunk, seq zero-padded to 16 digits
//	<run>log-index/<stage>/<attempt>        empty marker listing the attempts that have a log
//	<run>log-followers/<stage>/<attempt>/<id>  empty marker of a follower of the log, on its store's session lease
//
// and, for the log budgets, outside the runs' keys (a namespace cannot be
// named "_log-usage"):
//
//	<prefix>_log-usage/<namespace>/<name>/<uid>/<stage>/<attempt>   the log's size in bytes (decimal, plain)
//
// <kind> is one of the Kind constants, <stage> is escaped with url.PathEscape
// and <attempt> is zero-padded to 10 digits, so that lexical key order is
// numeric order. The run's UID is part of every key, so a run re-created with
// the same name never sees the artifacts of its predecessor.
//
// # Artifacts
//
// Put writes the chunks of a new artifact under a fresh random generation,
// then swaps the meta key in one transaction (which also returns the previous
// meta), then deletes the previous generation. Readers therefore see either the
// old or the new artifact, never a mix. A reader that is part-way through an
// artifact when it is replaced finishes reading the old generation from etcd's
// MVCC history (until that history is compacted). Get verifies the SHA-256 of
// the streamed bytes against the meta at the end of the stream.
//
// # Logs
//
// Every stage attempt has one log. AppendLog adds chunks with a
// compare-and-swap transaction on the log's meta key: the transaction puts the
// chunk under the next sequence number and the updated meta only if the meta
// has not been modified since it was read. Concurrent appenders (for example on
// several server replicas) are thereby serialised; each chunk is stored exactly
// once and sequence order equals commit (ModRevision) order. The size cap is
// enforced in the same transaction. StreamLog reads the existing chunks and,
// when following, watches the log's key prefix starting at the revision right
// after the initial read, so that nothing is missed or repeated and no polling
// takes place.
//
// A follower also records itself under the log's followers prefix while it
// follows, on a lease that its store keeps alive (15 s). WatchLogFollowers
// tells the log's writer, on whichever replica, whether anyone follows: the
// API server collects a log nobody follows for up to a second before it
// appends, and one that is followed for 10 ms, and sends what it holds at
// once when a follower arrives.
//
// # Size limits
//
// Every kind and every log has a size limit (see Limits). Content beyond the
// limit is dropped and TruncationMarker, formatted with the limit, is appended
// once; Meta.Truncated reports it. A plan file is the exception: a truncated
// plan file cannot be applied, so Put returns an error wrapping ErrTooLarge
// instead.
//
// Logs also have budgets together: all logs of a run (Limits.RunLogs), of a
// namespace (Limits.NamespaceLogs) and of the whole store
// (Limits.TotalLogs), so that no run or tenant can fill etcd until its space
// alarm makes the whole API read-only. Each log's size is kept in a small
// usage key, written in the same transaction as its chunks and on the run's
// lease; a store sums them every few seconds (and counts its own appends at
// once), so the budgets hold across replicas within a few seconds' worth of
// output. A log cut by a budget ends with a marker that names it.
//
// # Encryption at rest
//
// Every chunk and every meta value goes through the configured
// k8s.io/apiserver value.Transformer with value.DefaultContext(key) as
// authenticated data, so the encryption configured for the server with
// --encryption-provider-config applies to the artifacts, and a value cannot be
// moved to another key without failing authentication. Only the lease ID, the
// empty log index and follower markers and the logs' sizes are stored in
// plain; they hold no run data.
//
// # Retention
//
// All keys of a run are attached to one etcd lease per run, with a TTL of
// Options.Retention counted from the first write of the run. The lease's ID
// is a hash of the run's key prefix, which holds its UID: the first writer
// grants it, and every other writer, on any replica, finds it granted, with no
// key or transaction to record it. When the lease expires etcd deletes every
// key of the run. DeleteRun removes the run's keys at once and revokes the
// lease (and the one recorded under <run>lease by an older server).
package artifacts
