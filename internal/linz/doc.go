// Package linz checks that a distributed file system's namespace is
// linearizable, as seen by several clients at once: a porcupine model of a
// small namespace (model.go), a recorder of concurrent operations with
// their call and return times (history.go), random workers that drive any
// file system through a narrow interface (fs.go, worker.go) and the check
// with its diagnostics (check.go).
//
// Why a small namespace: a few names in two directories (Slots), so that
// operations from different clients collide all the time; a history of a
// few seconds then holds thousands of conflicts, and porcupine can still
// check it (the search is exponential in the operations that overlap,
// which a small state keeps few).
//
// Why an interface: the same workload and model check FUSE mounts (OSFS,
// paths under a mount point, as internal/fusefs does with several weft
// mount processes) and clients of the Go library (internal/edge wraps
// client.Client: two edge servers and a direct client sharing one
// upstream namespace). The package imports nothing of weft, so any layer's
// tests may use it.
//
// What the model checks and what it excuses (model.go has the detail):
// names and the inode each holds, mode bits, the content of small files
// written whole at offset 0 and committed at close; a stat or chmod that
// finds its file is a lookup and then a read or change of the inode found,
// two steps a rename may come between, as on any POSIX file system (a
// local directory's history showed it); an operation whose
// outcome is unknown (an unexpected error) may or may not have happened;
// a reread through a descriptor of a file no name holds any more says
// nothing. One worker per client: within one FUSE mount, data is coherent
// but not atomic at close (the kernel's page cache shows a write to the
// mount's other processes before close commits it for other mounts).
//
// A failed check prints where porcupine got stuck and the shortest
// illegal prefix of the history, saves the history (LoadOps reads it
// back; fusefs's TestLinzReplay checks it again) and porcupine's
// visualization.
package linz
