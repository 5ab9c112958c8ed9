package store

import (
	"os"
	"syscall"
)

// datasync flushes a file's data and the metadata needed to read it (its
// size), skipping timestamps: fdatasync.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
