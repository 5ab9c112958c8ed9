package posixtest

import "syscall"

// Open flags package os does not name, Linux values.
const (
	syscallODirectory = syscall.O_DIRECTORY
	syscallONofollow  = syscall.O_NOFOLLOW
)

// Sizes the data cases are built around. An adapter should configure its
// file system with chunks of TestChunkSize and files inline up to
// TestInlineLimit so that the cases cross both boundaries.
const (
	TestChunkSize   = 64 << 10
	TestInlineLimit = 4096
)
