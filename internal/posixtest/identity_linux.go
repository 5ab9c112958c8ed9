package posixtest

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/weftfs/weft/internal/core"
)

// runAs runs fn with the file system identity creds (nil: unchanged) on a
// locked OS thread. It uses the raw setfsuid, setfsgid and setgroups system
// calls, which change only the calling thread (Go's syscall.Setuid and
// friends change every thread of the process). Leaving fsuid 0 also drops
// the file system capabilities (CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE,
// CAP_FSETID), so the kernel judges the call as it would an ordinary user's.
//
// This needs CAP_SETUID and CAP_SETGID and briefly gives a thread another
// identity, which is why only tests enable it (LocalFSAs, localFS.canAs)
// and LocalFS's As returns nil.
func runAs(creds *core.Creds, fn func() error) error {
	if creds == nil {
		return fn()
	}
	runtime.LockOSThread()
	saved, err := getThreadGroups()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	if err := setThreadIdentity(creds.UID, creds.GID, creds.Groups); err != nil {
		// The thread may be half changed: keep it locked so that it ends
		// with this goroutine rather than serving others.
		if rerr := setThreadIdentity(0, 0, saved); rerr != nil {
			return fmt.Errorf("%w; restoring root: %v", err, rerr)
		}
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := setThreadIdentity(0, 0, saved); err != nil {
		return fmt.Errorf("restoring root after a call as %d: %w", creds.UID, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func getThreadGroups() ([]uint32, error) {
	buf := make([]uint32, 256)
	n, _, e := syscall.RawSyscall(syscall.SYS_GETGROUPS, uintptr(len(buf)), uintptr(unsafe.Pointer(&buf[0])), 0)
	if e != 0 {
		return nil, fmt.Errorf("getgroups: %w", e)
	}
	return buf[:n], nil
}

// setThreadIdentity sets this thread's supplementary groups, fsgid and fsuid,
// in that order (setgroups needs CAP_SETGID, which a lower fsuid keeps, but
// do it first anyway), and checks that they took.
func setThreadIdentity(uid, gid uint32, groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	// setfsuid and setfsgid return the previous value and report no error:
	// read the value back by asking for an invalid id.
	syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(gid), 0, 0)
	if got, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, ^uintptr(0), 0, 0); uint32(got) != gid {
		return fmt.Errorf("setfsgid %d: still %d", gid, got)
	}
	syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0)
	if got, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(got) != uid {
		return fmt.Errorf("setfsuid %d: still %d", uid, got)
	}
	return nil
}

// RunAs runs fn on a locked thread whose file system identity is creds, as
// the permission cases do: tests of other mounts call it to act as another
// user. It needs root.
func RunAs(creds core.Creds, fn func() error) error {
	return runAs(&creds, fn)
}
