package posixtest

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/core"
	"golang.org/x/sys/unix"
)

// LocalFS returns an FS over the local directory root: every call is the
// system call on root+path, so the suite can be checked against the kernel.
// Its As returns nil: acting as another user means changing a thread's
// identity (runAs), which LocalFSAs does.
//
// The raw system calls are used rather than package os wherever os would
// translate mode bits or flags, so the suite sees exactly what Linux does.
func LocalFS(root string) FS {
	return &localFS{root: strings.TrimRight(root, "/")}
}

// LocalFSAs is LocalFS with a working As: a view's calls run with its
// user's fsuid, fsgid and groups, set on a locked thread for the duration of
// each call (runAs). It needs CAP_SETUID and CAP_SETGID, and briefly gives
// threads of the calling process other identities: it is for tests, such as
// the suite run against a FUSE mount, whose server then sees each call come
// from the view's user.
func LocalFSAs(root string) FS {
	return &localFS{root: strings.TrimRight(root, "/"), canAs: true}
}

type localFS struct {
	root string
	// creds, if set, is the identity every call runs with (see runAs).
	creds *core.Creds
	// canAs enables As: only tests set it (LocalFSAs; see runAs).
	canAs bool
}

// do runs fn, as l.creds if set.
func (l *localFS) do(fn func() error) error { return runAs(l.creds, fn) }

var _ FS = (*localFS)(nil)

// real maps an FS path to the local one. An empty path stays empty so that
// the kernel reports ENOENT for it, as it would for the FS.
func (l *localFS) real(path string) string {
	if path == "" {
		return ""
	}
	return l.root + "/" + strings.TrimLeft(path, "/")
}

func (l *localFS) Stat(path string) (core.Attr, error) {
	var st syscall.Stat_t
	if err := l.do(func() error { return syscall.Stat(l.real(path), &st) }); err != nil {
		return core.Attr{}, localError("stat", path, err)
	}
	return attrOfStat(&st), nil
}

func (l *localFS) Lstat(path string) (core.Attr, error) {
	var st syscall.Stat_t
	if err := l.do(func() error { return syscall.Lstat(l.real(path), &st) }); err != nil {
		return core.Attr{}, localError("lstat", path, err)
	}
	return attrOfStat(&st), nil
}

func attrOfStat(st *syscall.Stat_t) core.Attr {
	return core.Attr{
		Ino:   core.Ino(st.Ino),
		Mode:  st.Mode,
		Nlink: uint32(st.Nlink),
		UID:   st.Uid,
		GID:   st.Gid,
		Rdev:  uint32(st.Rdev),
		Size:  uint64(st.Size),
		Atime: time.Unix(st.Atim.Unix()),
		Mtime: time.Unix(st.Mtim.Unix()),
		Ctime: time.Unix(st.Ctim.Unix()),
	}
}

func (l *localFS) Open(path string, flags int, perm uint32) (File, error) {
	var fd int
	err := l.do(func() (err error) {
		fd, err = syscall.Open(l.real(path), flags|syscall.O_CLOEXEC, perm)
		return err
	})
	if err != nil {
		return nil, localError("open", path, err)
	}
	return &localFile{f: os.NewFile(uintptr(fd), path), path: path, creds: l.creds}, nil
}

func (l *localFS) Mkdir(path string, perm uint32) error {
	return localError("mkdir", path, l.do(func() error { return syscall.Mkdir(l.real(path), perm) }))
}

func (l *localFS) Mknod(path string, mode, rdev uint32) error {
	return localError("mknod", path, l.do(func() error { return syscall.Mknod(l.real(path), mode, int(rdev)) }))
}

func (l *localFS) Symlink(target, path string) error {
	return localError("symlink", path, l.do(func() error { return syscall.Symlink(target, l.real(path)) }))
}

func (l *localFS) Readlink(path string) (string, error) {
	buf := make([]byte, core.MaxSymlinkLen+1)
	var n int
	err := l.do(func() (err error) {
		n, err = syscall.Readlink(l.real(path), buf)
		return err
	})
	if err != nil {
		return "", localError("readlink", path, err)
	}
	return string(buf[:n]), nil
}

func (l *localFS) Link(oldPath, newPath string) error {
	return localError("link", newPath, l.do(func() error { return syscall.Link(l.real(oldPath), l.real(newPath)) }))
}

func (l *localFS) Unlink(path string) error {
	return localError("unlink", path, l.do(func() error { return syscall.Unlink(l.real(path)) }))
}

func (l *localFS) Rmdir(path string) error {
	return localError("rmdir", path, l.do(func() error { return syscall.Rmdir(l.real(path)) }))
}

func (l *localFS) Rename(oldPath, newPath string, flags uint32) error {
	err := l.do(func() error {
		return unix.Renameat2(unix.AT_FDCWD, l.real(oldPath), unix.AT_FDCWD, l.real(newPath), uint(flags))
	})
	return localError("rename", oldPath, err)
}

func (l *localFS) ReadDir(path string) ([]core.DirEntry, error) {
	var ents []os.DirEntry
	err := l.do(func() (err error) {
		ents, err = os.ReadDir(l.real(path))
		return err
	})
	if err != nil {
		return nil, localError("readdir", path, err)
	}
	out := make([]core.DirEntry, 0, len(ents))
	for _, e := range ents {
		d := core.DirEntry{Name: e.Name(), Mode: typeBits(e.Type())}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				d.Ino = core.Ino(st.Ino)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// typeBits converts a Go file type to the type bits of a POSIX mode.
func typeBits(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeDir != 0:
		return core.ModeDir
	case m&fs.ModeSymlink != 0:
		return core.ModeLink
	case m&fs.ModeNamedPipe != 0:
		return core.ModeFIFO
	case m&fs.ModeSocket != 0:
		return core.ModeSocket
	case m&fs.ModeCharDevice != 0:
		return core.ModeChar
	case m&fs.ModeDevice != 0:
		return core.ModeBlock
	}
	return core.ModeFile
}

func (l *localFS) Chmod(path string, mode uint32) error {
	return localError("chmod", path, l.do(func() error { return syscall.Chmod(l.real(path), mode) }))
}

func (l *localFS) Chown(path string, uid, gid int) error {
	return localError("chown", path, l.do(func() error { return syscall.Chown(l.real(path), uid, gid) }))
}

func (l *localFS) Lchown(path string, uid, gid int) error {
	return localError("lchown", path, l.do(func() error { return syscall.Lchown(l.real(path), uid, gid) }))
}

func (l *localFS) Chtimes(path string, atime, mtime time.Time) error {
	ts := []syscall.Timespec{syscall.NsecToTimespec(atime.UnixNano()), syscall.NsecToTimespec(mtime.UnixNano())}
	return localError("chtimes", path, l.do(func() error { return syscall.UtimesNano(l.real(path), ts) }))
}

func (l *localFS) Truncate(path string, size int64) error {
	return localError("truncate", path, l.do(func() error { return syscall.Truncate(l.real(path), size) }))
}

func (l *localFS) GetXattr(path, name string) (value []byte, err error) {
	err = l.do(func() error { value, err = l.getXattr(path, name); return err })
	return value, err
}

func (l *localFS) getXattr(path, name string) ([]byte, error) {
	for {
		n, err := unix.Getxattr(l.real(path), name, nil)
		if err != nil {
			return nil, localError("getxattr", path, err)
		}
		buf := make([]byte, n)
		n, err = unix.Getxattr(l.real(path), name, buf)
		if err == unix.ERANGE {
			continue // the value grew between the calls
		}
		if err != nil {
			return nil, localError("getxattr", path, err)
		}
		return buf[:n], nil
	}
}

func (l *localFS) SetXattr(path, name string, value []byte, flags uint32) error {
	return localError("setxattr", path, l.do(func() error { return unix.Setxattr(l.real(path), name, value, int(flags)) }))
}

func (l *localFS) ListXattr(path string) (names []string, err error) {
	err = l.do(func() error { names, err = l.listXattr(path); return err })
	return names, err
}

func (l *localFS) listXattr(path string) ([]string, error) {
	for {
		n, err := unix.Listxattr(l.real(path), nil)
		if err != nil {
			return nil, localError("listxattr", path, err)
		}
		buf := make([]byte, n)
		n, err = unix.Listxattr(l.real(path), buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, localError("listxattr", path, err)
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
}

func (l *localFS) RemoveXattr(path, name string) error {
	return localError("removexattr", path, l.do(func() error { return unix.Removexattr(l.real(path), name) }))
}

func (l *localFS) Access(path string, mask uint32) error {
	return localError("access", path, l.do(func() error {
		// AT_EACCESS: check as the file system identity, as the other
		// calls are (plain access(2) uses the real uid).
		return unix.Faccessat2(unix.AT_FDCWD, l.real(path), mask, unix.AT_EACCESS)
	}))
}

func (l *localFS) StatFS() (StatFS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(l.root+"/", &st); err != nil {
		return StatFS{}, localError("statfs", "/", err)
	}
	bs := uint64(st.Bsize)
	return StatFS{
		Capacity:  st.Blocks * bs,
		Used:      (st.Blocks - st.Bfree) * bs,
		Files:     st.Files - st.Ffree,
		FilesFree: st.Ffree,
		NameMax:   uint32(st.Namelen),
	}, nil
}

func (l *localFS) As(c core.Creds) FS {
	if !l.canAs {
		return nil
	}
	c.Groups = slices.Clone(c.Groups)
	return &localFS{root: l.root, creds: &c, canAs: true}
}

// localFile is an open local file whose errors carry kinds.
type localFile struct {
	f     *os.File
	path  string
	creds *core.Creds // writes drop setuid according to the writer
}

var _ File = (*localFile)(nil)

func (f *localFile) Read(p []byte) (int, error) {
	n, err := f.f.Read(p)
	return n, localError("read", f.path, err)
}

func (f *localFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(p, off)
	return n, localError("read", f.path, err)
}

func (f *localFile) Write(p []byte) (int, error) {
	var n int
	err := runAs(f.creds, func() (err error) { n, err = f.f.Write(p); return err })
	return n, localError("write", f.path, err)
}

// WriteAt calls pwrite itself: os.File.WriteAt refuses O_APPEND files, where
// Linux's pwrite appends.
func (f *localFile) WriteAt(p []byte, off int64) (int, error) {
	var n int
	err := runAs(f.creds, func() (err error) { n, err = syscall.Pwrite(int(f.f.Fd()), p, off); return err })
	if n < 0 {
		n = 0
	}
	return n, localError("write", f.path, err)
}

func (f *localFile) Seek(offset int64, whence int) (int64, error) {
	n, err := f.f.Seek(offset, whence)
	return n, localError("seek", f.path, err)
}

func (f *localFile) Close() error { return localError("close", f.path, f.f.Close()) }

func (f *localFile) Truncate(size int64) error {
	return localError("truncate", f.path, runAs(f.creds, func() error { return f.f.Truncate(size) }))
}

func (f *localFile) Sync() error { return localError("sync", f.path, f.f.Sync()) }

func (f *localFile) Stat() (core.Attr, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.f.Fd()), &st); err != nil {
		return core.Attr{}, localError("fstat", f.path, err)
	}
	return attrOfStat(&st), nil
}
