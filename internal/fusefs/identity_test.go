package fusefs

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// runAsUser runs fn with fsuid uid and fsgid gid (no supplementary groups)
// on a locked thread, so its system calls reach the mount as that user. The
// thread ends with the goroutine if its identity cannot be restored.
func runAsUser(uid, gid uint32, fn func() error) error {
	return runAsUserGroups(uid, gid, nil, fn)
}

// runAsUserGroups is runAsUser with supplementary groups.
func runAsUserGroups(uid, gid uint32, groups []uint32, fn func() error) error {
	runtime.LockOSThread()
	buf := make([]uint32, 256)
	n, _, e := syscall.RawSyscall(syscall.SYS_GETGROUPS, uintptr(len(buf)), uintptr(unsafe.Pointer(&buf[0])), 0)
	if e != 0 {
		runtime.UnlockOSThread()
		return fmt.Errorf("getgroups: %w", e)
	}
	saved := buf[:n]
	if err := setThreadIdentity(uid, gid, groups); err != nil {
		return err
	}
	ferr := fn()
	if err := setThreadIdentity(0, 0, saved); err != nil {
		return fmt.Errorf("restoring root: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func setThreadIdentity(uid, gid uint32, groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
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
