// Package errs is weft's error vocabulary: every error that crosses a package
// boundary carries a Kind, aligned with a POSIX errno but independent of it.
// Kinds travel over the wire (package rpc encodes them) and become errno values
// in exactly one place, the FUSE layer. Nothing here matches errors by text.
package errs

import (
	"errors"
	"fmt"
)

// Kind classifies an error. The numeric values are part of the wire protocol:
// append new kinds, never renumber.
type Kind uint8

const (
	Other        Kind = iota // unclassified; EIO at the FUSE boundary
	NotExist                 // ENOENT
	Exist                    // EEXIST
	NotDir                   // ENOTDIR
	IsDir                    // EISDIR
	NotEmpty                 // ENOTEMPTY
	Permission               // EACCES: the mode bits deny the caller
	NotPermitted             // EPERM: the operation is reserved (owner, root)
	Invalid                  // EINVAL
	NameTooLong              // ENAMETOOLONG
	NoSpace                  // ENOSPC
	Loop                     // ELOOP
	CrossDevice              // EXDEV
	NoData                   // ENODATA: no such extended attribute
	Range                    // ERANGE: a buffer or value is too large
	Stale                    // ESTALE: the handle names an object that is gone
	IO                       // EIO: a device or replica failed
	Corrupt                  // EIO: stored data failed its checksum
	Unavailable              // a server could not be reached; retry elsewhere
	Timeout                  // ETIMEDOUT: a deadline passed
	Canceled                 // EINTR: the caller gave up
	Busy                     // EBUSY
	TooBig                   // EFBIG
	NotSupported             // EOPNOTSUPP
	BadHandle                // EBADF
	Protocol                 // EPROTO: a malformed frame or message
	WrongServer              // the request reached a server that does not own the key (GIGA+ redirect)
	ReadOnly                 // EROFS
	Lost                     // EIO: a replica lost data it should hold (a replaced disk, a cut chunk); try another
	// CapabilityRefused (EACCES): a store refused the capability a chunk
	// request carried (forged, expired, revoked, or for other chunks or
	// rights). A client fetches a fresh one from the meta server and tries
	// again; only if the meta server refuses too is it a permission error.
	CapabilityRefused
	kindCount
)

var kindNames = [...]string{
	Other:        "error",
	NotExist:     "no such file or directory",
	Exist:        "file exists",
	NotDir:       "not a directory",
	IsDir:        "is a directory",
	NotEmpty:     "directory not empty",
	Permission:   "permission denied",
	NotPermitted: "operation not permitted",
	Invalid:      "invalid argument",
	NameTooLong:  "file name too long",
	NoSpace:      "no space left on device",
	Loop:         "too many levels of symbolic links",
	CrossDevice:  "cross-device link",
	NoData:       "no data available",
	Range:        "result out of range",
	Stale:        "stale file handle",
	IO:           "input/output error",
	Corrupt:      "data corrupted",
	Unavailable:  "server unavailable",
	Timeout:      "timed out",
	Canceled:     "canceled",
	Busy:         "resource busy",
	TooBig:       "file too large",
	NotSupported: "operation not supported",
	BadHandle:    "bad file handle",
	Protocol:     "protocol error",
	WrongServer:  "wrong server",
	ReadOnly:     "read-only file system",
	Lost:         "data lost on this replica",

	CapabilityRefused: "capability refused",
}

func (k Kind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a kind this version knows. Decoders use it to
// reject garbage from the wire.
func (k Kind) Valid() bool { return k < kindCount }

// Error is an error with a kind, the operation that failed, and optionally the
// path or name involved and an underlying cause.
type Error struct {
	Kind Kind
	Op   string // "lookup", "write chunk", ...
	Path string // the name or path involved, if any
	Msg  string // extra detail for people
	Err  error  // the cause, if any
}

func (e *Error) Error() string {
	s := e.Op
	if e.Path != "" {
		s += " " + e.Path
	}
	if s != "" {
		s += ": "
	}
	switch {
	case e.Msg != "" && e.Err != nil:
		s += e.Msg + ": " + e.Err.Error()
	case e.Msg != "":
		s += e.Msg
	case e.Err != nil:
		s += e.Err.Error()
	default:
		s += e.Kind.String()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, errs.NotExist) work for any wrapped *Error.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && e.Kind == k
}

// Error lets a Kind be used as an errors.Is target and as a bare error.
func (k Kind) Error() string { return k.String() }

// E builds an *Error of kind k for operation op.
func E(k Kind, op string) *Error { return &Error{Kind: k, Op: op} }

// New builds an *Error with a formatted message.
func New(k Kind, op, format string, args ...any) *Error {
	return &Error{Kind: k, Op: op, Msg: fmt.Sprintf(format, args...)}
}

// Wrap gives cause the kind k, naming the operation and path. A nil cause
// gives nil.
func Wrap(k Kind, op, path string, cause error) error {
	if cause == nil {
		return nil
	}
	return &Error{Kind: k, Op: op, Path: path, Err: cause}
}

// WithPath returns a copy of err with Path set, keeping its kind; other errors
// are wrapped as kind Other.
func WithPath(err error, op, path string) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: KindOf(err), Op: op, Path: path, Err: err}
}

// KindOf returns the kind of the outermost *Error in err's chain, or Other.
// A bare Kind used as an error is its own kind.
func KindOf(err error) Kind {
	if err == nil {
		return Other
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var k Kind
	if errors.As(err, &k) {
		return k
	}
	return Other
}

// Is reports whether err has kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }
