// Package meta is weft's metadata server: it owns one server's share of the
// namespace (directories, entries, attributes, small-file content, symlinks,
// extended attributes) in a Pebble store on disk, enforces POSIX permissions
// with the caller's credentials, and serves the meta protocol
// (proto/meta.proto and lock.proto: methods 1-99 in weftpb/methods.go, of
// which 40-59 are calls between meta servers).
//
// # Layout
//
// docs/format.md is the reference. In short: directory entries are keyed by
// (directory ino, GIGA+ partition, name hash, name), so a directory's entries
// are contiguous, split cleanly by hash bit and list in a stable order.
// Following IndexFS, a file, symlink or special file with one link keeps its
// attributes inside its entry, so create, stat and unlink touch one entry key
// (and the parent's record, for its mtime). Directories and files with more
// than one link have a standalone inode record that entries point to; a
// file's second link moves its attributes there and losing the second-to-last
// link moves them back (unless the last entry is on another server than the
// record: then the record stays, with one link). Regular files start inline: content up to
// Config.InlineLimit lives in the record until a commit makes the file
// chunked.
//
// # Concurrency
//
// Pebble batches are atomic but are not transactions. Each mutation runs as a
// read-check-write under striped locks (see txn.go): a directory's stripe
// guards its entries and record, an inode's stripe its standalone record.
// Renames lock both parents in stripe order; a directory moving to another
// parent also takes a server-wide rename mutex so that the "not under itself"
// check sees a stable tree. Reads take no locks: each reads committed state.
//
// # Durability
//
// In sync mode (the default) an operation is acknowledged only after its
// batch is in the WAL on disk. The batch is applied under the locks with
// pebble's ApplyNoSyncWait and the fsync is awaited after the locks are
// released, so concurrent operations, even in one directory, share fsyncs
// (group commit). A crash loses no acknowledged operation. A read may see the
// result of a concurrent mutation that is applied but not yet synced; if the
// server crashes before that fsync, a client may have observed a change that
// is then gone (its mutator was never acknowledged).
//
// In async mode an operation is acknowledged once applied; the WAL is synced
// every Config.AsyncInterval (default 100ms) and at Close. A crash, even of
// the process alone (pebble buffers unsynced WAL data in memory), may lose
// the operations acknowledged during the last interval plus the time of one
// fsync. What survives is always a prefix of the operations in commit order,
// each whole: the namespace stays consistent, only recent history is lost.
//
// In both modes inode numbers are reserved in blocks with a synced write
// before use, so a number is never handed out twice, even across crashes.
//
// # Storage failure
//
// Visibility before durability has a cost when the WAL write fails (a full
// or failing disk): the failed batch is already in the memtable, and pebble
// cannot go on after a failed WAL write (its next commit panics inside its
// commit pipeline and wedges it). So the first storage error fails the
// server (health.go): every later write is refused at once with the error's
// kind (errs.NoSpace for ENOSPC, errs.IO otherwise) and a message asking for
// a restart, no call ever enters pebble's commit pipeline again, and the
// store is reopened read-only from disk, so that reads go on but no longer
// see the applied-but-failed batches. A reader may have seen such a change
// in the moment before the failure, as with a crash before an fsync. A
// restart on a disk that is still full fails in Open with one error.
package meta
