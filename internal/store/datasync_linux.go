package store

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// datasync flushes a file's data and the metadata needed to read it (its
// size), skipping timestamps: fdatasync.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// startWriteback starts writing the dirty pages of [off, off+n) to the
// device without waiting for them: sync_file_range(SYNC_FILE_RANGE_WRITE).
// On ext4 it also allocates their blocks, so the fdatasync that follows
// mostly waits for I/O already under way.
func startWriteback(f *os.File, off, n int64) error {
	return unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
