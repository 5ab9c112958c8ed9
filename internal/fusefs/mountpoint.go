package fusefs

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// CheckMountPoint reports whether dir can take a new mount: it must be an
// existing directory that nothing is mounted on. A mount left behind by a
// weft mount that died (its connection is gone, so stat fails with
// ENOTCONN) is explained, with the command that clears it.
func CheckMountPoint(dir string) error {
	const op = "mount"
	var st syscall.Stat_t
	err := syscall.Stat(dir, &st)
	if err == nil && Stale(dir) {
		err = syscall.ENOTCONN
	}
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return &errs.Error{Kind: errs.Busy, Op: op, Path: dir,
			Msg: "a mount whose process is gone is still attached here (transport endpoint is not connected); " +
				"clear it with 'weft umount " + dir + "' and mount again"}
	case errors.Is(err, syscall.ENOENT):
		return &errs.Error{Kind: errs.NotExist, Op: op, Path: dir, Msg: "mount point does not exist (create the directory first)"}
	case err != nil:
		return errs.Wrap(localKind(err), op, dir, err)
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return &errs.Error{Kind: errs.NotDir, Op: op, Path: dir, Msg: "mount point is not a directory"}
	}
	if m, ok := mountAt(dir); ok {
		return &errs.Error{Kind: errs.Busy, Op: op, Path: dir,
			Msg: "already a mount point (" + m.fstype + " from " + m.source + "); unmount it first ('weft umount " + dir + "')"}
	}
	return nil
}

// Stale reports whether dir is a mount point whose FUSE server is gone.
// statfs always reaches the server (stat may be answered from the kernel's
// attribute cache for a while after the server died).
func Stale(dir string) bool {
	var st syscall.Statfs_t
	return errors.Is(syscall.Statfs(dir, &st), syscall.ENOTCONN)
}

// Mounted reports whether a weft file system is mounted on dir (live or
// stale).
func Mounted(dir string) bool {
	m, ok := mountAt(dir)
	return ok && m.fstype == "fuse.weft"
}

// Unmount detaches whatever FUSE file system is mounted on dir, as
// 'weft umount' does: fusermount3 -u (or a plain umount as root), and when
// that fails because the mount is busy, a lazy unmount that detaches it now
// and lets its last users finish (MNT_DETACH as root, fusermount3 -u -z
// otherwise). It works for a mount whose server died, too.
func Unmount(dir string) error {
	const op = "umount"
	abs, err := filepath.Abs(dir)
	if err != nil {
		return errs.Wrap(errs.Invalid, op, dir, err)
	}
	if _, ok := mountAt(abs); !ok {
		return &errs.Error{Kind: errs.Invalid, Op: op, Path: abs, Msg: "nothing is mounted here"}
	}
	first := plainUnmount(abs)
	if first == nil {
		return nil
	}
	if err := lazyUnmount(abs); err != nil {
		return errs.Wrap(errs.Busy, op, abs, errors.Join(first, err))
	}
	return nil
}

func plainUnmount(dir string) error {
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(dir, 0); err == nil || !errors.Is(err, syscall.EPERM) {
			return err
		}
	}
	return fusermount(dir, "-u")
}

func lazyUnmount(dir string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return fusermount(dir, "-u", "-z")
}

// fusermount runs fusermount3 (or fusermount) with args and dir.
func fusermount(dir string, args ...string) error {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return errs.New(errs.NotSupported, "umount", "fusermount3 is not installed (Debian package fuse3)")
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append(args, dir)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return errs.New(errs.Busy, "umount", "%s", msg)
	}
	return nil
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	point, fstype, source string
}

// mountAt returns the topmost mount on dir, if any.
func mountAt(dir string) (mountInfo, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, false
	}
	defer f.Close()
	var found mountInfo
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, good := parseMountInfo(sc.Text())
		if good && m.point == dir {
			found, ok = m, true // later lines are mounted on top
		}
	}
	return found, ok
}

// parseMountInfo parses "id parent maj:min root point opts [tags] - type source superopts".
func parseMountInfo(line string) (mountInfo, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return mountInfo{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 5 || len(b) < 2 {
		return mountInfo{}, false
	}
	return mountInfo{point: unescapeMount(a[4]), fstype: b[0], source: unescapeMount(b[1])}, true
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// localKind gives an error of a local system call a weft kind.
func localKind(err error) errs.Kind {
	switch {
	case errors.Is(err, syscall.EACCES):
		return errs.Permission
	case errors.Is(err, syscall.ENOTDIR):
		return errs.NotDir
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errs.NameTooLong
	case errors.Is(err, syscall.ELOOP):
		return errs.Loop
	}
	return errs.IO
}
