package fusefs

import (
	"log/slog"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// errnoOf is the one table that turns weft's error kinds into errno values.
// A kind missing here (a new kind) becomes EIO; TestErrnoTableComplete fails
// until it is added.
var errnoOf = map[errs.Kind]syscall.Errno{
	errs.Other:        syscall.EIO,
	errs.NotExist:     syscall.ENOENT,
	errs.Exist:        syscall.EEXIST,
	errs.NotDir:       syscall.ENOTDIR,
	errs.IsDir:        syscall.EISDIR,
	errs.NotEmpty:     syscall.ENOTEMPTY,
	errs.Permission:   syscall.EACCES,
	errs.NotPermitted: syscall.EPERM,
	errs.Invalid:      syscall.EINVAL,
	errs.NameTooLong:  syscall.ENAMETOOLONG,
	errs.NoSpace:      syscall.ENOSPC,
	errs.Loop:         syscall.ELOOP,
	errs.CrossDevice:  syscall.EXDEV,
	errs.NoData:       syscall.ENODATA,
	errs.Range:        syscall.ERANGE,
	// ESTALE makes the kernel look the name up again (LOOKUP_REVAL) and
	// retry: what a name replaced by another mount needs.
	errs.Stale:        syscall.ESTALE,
	errs.IO:           syscall.EIO,
	errs.Corrupt:      syscall.EIO,
	errs.Lost:         syscall.EIO,
	errs.Unavailable:  syscall.EIO, // as a soft NFS mount: the server is gone
	errs.Timeout:      syscall.ETIMEDOUT,
	errs.Canceled:     syscall.EINTR,
	errs.Busy:         syscall.EBUSY,
	errs.TooBig:       syscall.EFBIG,
	errs.NotSupported: syscall.EOPNOTSUPP,
	errs.BadHandle:    syscall.EBADF,
	errs.Protocol:     syscall.EPROTO,
	// The client follows GIGA+ redirects itself; one that escapes is a bug.
	errs.WrongServer: syscall.EIO,
	errs.ReadOnly:    syscall.EROFS,
	// A store refused a capability the client could not renew.
	errs.CapabilityRefused: syscall.EACCES,
}

// errno converts err to the errno the kernel gets; nil is 0.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := errnoOf[errs.KindOf(err)]; ok {
		return e
	}
	return syscall.EIO
}

// serious reports whether an error says something is wrong with the cluster
// or with weft, rather than with the caller's request: those are logged.
func serious(err error) bool {
	switch errs.KindOf(err) {
	case errs.Other, errs.IO, errs.Corrupt, errs.Lost, errs.Unavailable, errs.Timeout, errs.Protocol, errs.WrongServer:
		return true
	}
	return false
}

// fail logs err if it is serious and returns its errno.
func (fsys *fileSystem) fail(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if serious(err) {
		fsys.log.Warn("fuse operation failed", slog.String("op", op), slog.Any("err", err))
	}
	return errno(err)
}
