// Package fsck checks and repairs the namespace a cluster's meta servers
// hold (docs/format.md): every entry in the partition and on the server its
// name's hash says, no name in two places, no entry pointing to a missing
// record, no standalone record that nothing names, partition records that
// split every directory's names without overlap or gap, and counts that
// match what they count.
//
// It works on a running cluster (through the meta servers' Scan and peer
// lock calls) or on a stopped one (opening every meta server's Pebble store
// directly), never on a mix: a running server may hold locks and intents
// that concern the stopped ones.
//
// The hard part is that the scan of a running cluster is no snapshot: the
// servers' keys are read page by page, one server after another, while
// operations move entries between partitions and servers. Nothing the scan
// sees is reported as it is. Each suspicion is checked again while fsck
// holds the lock stripes of every record involved on every server involved,
// taken in the order coordinating meta servers take them (servers by id,
// stripes ascending), so no operation is half done on those records; only
// an operation a crash interrupted can be, and its intent or split record
// says so. Such records are "pending": fsck waits a while for the meta
// server that owns them to finish them, and reports them as work in
// progress, not damage, if it does not.
//
// Memory: a scan keeps a few words per directory partition and per
// standalone inode record, 8 bytes per entry (the inode numbers of files
// whose attributes live in their entries, to find one named twice), and
// the suspicions, so a directory of a million files costs about 8 MB.
package fsck
