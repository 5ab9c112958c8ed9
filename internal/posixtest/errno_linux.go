package posixtest

import (
	"errors"
	"io"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// errnoKinds maps the errno values a local file system returns to weft's
// kinds: the inverse of the FUSE layer's table, for the local adapter only.
var errnoKinds = map[syscall.Errno]errs.Kind{
	syscall.ENOENT:       errs.NotExist,
	syscall.EEXIST:       errs.Exist,
	syscall.ENOTDIR:      errs.NotDir,
	syscall.EISDIR:       errs.IsDir,
	syscall.ENOTEMPTY:    errs.NotEmpty,
	syscall.EACCES:       errs.Permission,
	syscall.EPERM:        errs.NotPermitted,
	syscall.EINVAL:       errs.Invalid,
	syscall.ENAMETOOLONG: errs.NameTooLong,
	syscall.ENOSPC:       errs.NoSpace,
	syscall.ELOOP:        errs.Loop,
	syscall.EXDEV:        errs.CrossDevice,
	syscall.ENODATA:      errs.NoData,
	syscall.ERANGE:       errs.Range,
	syscall.ESTALE:       errs.Stale,
	syscall.EIO:          errs.IO,
	syscall.ETIMEDOUT:    errs.Timeout,
	syscall.EINTR:        errs.Canceled,
	syscall.EBUSY:        errs.Busy,
	syscall.EFBIG:        errs.TooBig,
	syscall.EOPNOTSUPP:   errs.NotSupported,
	syscall.EBADF:        errs.BadHandle,
	syscall.EPROTO:       errs.Protocol,
	syscall.EROFS:        errs.ReadOnly,
}

// KindOfErrno returns the kind of errno e, or errs.Other for an errno weft
// has no kind for.
func KindOfErrno(e syscall.Errno) errs.Kind {
	if k, ok := errnoKinds[e]; ok {
		return k
	}
	return errs.Other
}

// localError gives err from a system call on path a kind. io.EOF stays
// io.EOF: it is the end of a read, not a failure.
func localError(op, path string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		return errs.Wrap(errs.Other, op, path, err)
	}
	return errs.Wrap(KindOfErrno(e), op, path, err)
}
