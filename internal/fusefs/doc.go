// Package fusefs mounts a weft cluster as a POSIX file system with go-fuse v2.
// It is the only package that imports go-fuse, and the only place where
// weft's error kinds become errno values (errno.go, one table).
//
// Every node of the mounted tree is a Node: a go-fuse Inode that knows its
// weft inode number. The meta server finds a one-link file through its
// parent and name (client.Ref), so a Node asks go-fuse's tree for its current
// parent and name on every call; go-fuse moves the tree on rename and unlink.
//
// # Identity and permissions
//
// Every request runs with the caller's fsuid, fsgid and supplementary groups
// (the groups come from /proc/PID/status, cached for a second per thread), and
// the meta server decides, exactly as it does for the client library. The
// mount also sets default_permissions, so the kernel checks the mode bits
// too, with the attributes it has cached: without it, a path walk through a
// cached dentry never asks the file system, and a user could reach a file
// below a directory it may not search for as long as the dentry is cached.
// Both checks apply the same POSIX rules; when they disagree (another mount
// changed a mode less than the attribute timeout ago) the stricter one wins
// for that second.
//
// # Kernel caching
//
// These choices give close-to-open consistency between mounts (what a client
// writes is visible to others after it closes the file and they open it) at
// local-cache speed for everything else. Leases will lengthen them.
//
//   - Entries and attributes are cached for 1 s (Options.EntryTimeout,
//     AttrTimeout). The kernel forgets a file's cached size and times after
//     every write through it, so a writer's next stat asks, and gets the
//     client's write-back size and mtime.
//   - Failed lookups are not cached (NegativeTimeout 0): a name another mount
//     creates is visible at once. A compiler probing include paths pays one
//     round trip per miss.
//   - Open compares the file's size and mtime with what this mount last saw.
//     Unchanged: the kernel keeps its page cache (FOPEN_KEEP_CACHE), so a warm
//     reread never reaches the servers. Changed: the page cache is dropped and
//     the kernel's cached attributes are invalidated before open returns, so
//     reads see the new size. A name that now holds another inode answers
//     ESTALE, and the kernel looks the name up again.
//   - Data cache invalidation is explicit (ExplicitDataCacheControl): the
//     kernel does not drop a file's pages whenever a getattr shows a new
//     mtime, which this mount's own writes cause all the time.
//   - The absence of security.capability, which the kernel asks for before
//     every write, is cached for the attribute timeout.
//   - O_APPEND handles use direct I/O and the client appends at its own idea
//     of the end of file: the kernel's cached size could be stale if another
//     mount appended, and a page-cache append at a stale offset would
//     overwrite the other mount's data.
//   - Writes go through the page cache to the client at once (no writeback
//     cache): the kernel's writeback cache owns size and mtime while pages
//     are dirty, which close-to-open between mounts cannot allow. Shared
//     writable mmap works all the same (pages are written back with WRITE).
//   - Reads and writes are up to 1 MiB (MaxWrite); readahead is raised to
//     1 MiB through the mount's bdi when running as root; up to 64
//     background requests (readahead, writeback) are in flight.
//   - Symlink targets are cached by the kernel: weft symlinks never change
//     and inode numbers are never reused.
//
// # Open files whose name is gone
//
// An unlinked file stays readable and writable through the handles that had
// it open: the client keeps its content (inline data in memory, chunks on
// the stores until the last close, when it reclaims them), and getattr of
// such a node answers from the last attributes seen, with the client's size
// and a link count of 0.
//
// # Interrupts and deadlocks
//
// Requests ignore the kernel's interrupts: every weft operation is a bounded
// call (Options.OpTimeout), and honouring interrupts would hand spurious EINTR
// to callers that are merely preempted (the Go runtime signals its threads
// with SIGURG constantly; fsx's raw pread failed so when reads honoured
// them). Reads are bounded much tighter than OpTimeout: a read meets a
// stopped or dead store for about the client's ReplicaTimeout (2 s) when
// another replica answers, and fails with EIO after its StoreTimeout (20 s)
// when none does; an upload to such a store fails after StoreTimeout, and
// the write, flush or close that waits for it reports EIO.
//
// Cache invalidations (go-fuse Notify calls) are never made from inside a
// handler, with three exceptions: Open invalidates the attributes (offset
// -1, no pages) of the inode being opened, which takes no lock the kernel
// holds during OPEN; a write that cleared setuid/setgid invalidates the
// attributes the same way (the kernel holds the inode's lock during WRITE,
// but an attribute-only invalidation does not take it); and a granted lock
// may invalidate the inode's pages and attributes (another mount changed
// the file), which is
// safe because the kernel holds no inode lock during a lock request. A
// blocking lock request (SETLKW) is the one request that honours interrupts:
// its wait ends with EINTR.
//
// A process must not mmap files of a mount that the same process serves:
// a page fault blocks its thread where the Go runtime cannot preempt it, and
// a garbage collection then waits for it while the fault waits for the
// server. The tests keep mmap users in separate processes.
package fusefs
