package fusefs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/weftfs/weft/internal/errs"
)

// These tests check what the conformance suite cannot express through its
// FS interface: descriptors outliving names, xattr namespaces, fallocate,
// SEEK_DATA/SEEK_HOLE, UTIME_NOW/UTIME_OMIT, directory offsets, O_APPEND,
// and the mount's own checks.

func TestOpenUnlinkedFile(t *testing.T) {
	m, _ := newMountedFS(t)
	for _, size := range []int{100, 300 << 10} { // inline and chunked
		path := filepath.Join(m.Dir(), "f")
		want := bytes.Repeat([]byte("abcdefg"), size/7)
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("size %d: stat after unlink: %v", size, err)
		}
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d: read of the unlinked file: %v (equal %v)", size, err, bytes.Equal(got, want))
		}
		if _, err := f.WriteAt([]byte("XYZ"), int64(len(want))); err != nil {
			t.Fatalf("size %d: write to the unlinked file: %v", size, err)
		}
		want = append(want, "XYZ"...)
		st, err := f.Stat()
		if err != nil {
			t.Fatalf("size %d: fstat of the unlinked file: %v", size, err)
		}
		if st.Size() != int64(len(want)) || st.Sys().(*syscall.Stat_t).Nlink != 0 {
			t.Errorf("size %d: fstat: size %d nlink %d, want %d and 0", size, st.Size(), st.Sys().(*syscall.Stat_t).Nlink, len(want))
		}
		if err := f.Truncate(int64(len(want) - 1)); err != nil {
			t.Fatalf("size %d: ftruncate of the unlinked file: %v", size, err)
		}
		want = want[:len(want)-1]
		got = make([]byte, len(want)+10)
		k, _ := f.ReadAt(got, 0)
		if !bytes.Equal(got[:k], want) {
			t.Errorf("size %d: content after write and ftruncate differs (%d bytes read, want %d)", size, k, len(want))
		}
		if err := f.Close(); err != nil {
			t.Errorf("size %d: close of the unlinked file: %v", size, err)
		}
	}
	if names, _ := os.ReadDir(m.Dir()); len(names) != 0 {
		t.Errorf("directory not empty after the files were removed: %v", names)
	}
}

func TestRenameOpenFile(t *testing.T) {
	m, _ := newMountedFS(t)
	dir := m.Dir()
	if err := os.Mkdir(dir+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("1"), 100<<10)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+"/a", dir+"/d/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after rename: %v", err)
	}
	data, err := os.ReadFile(dir + "/d/b")
	if err != nil || len(data) != 100<<10+4 || !bytes.HasSuffix(data, []byte("tail")) {
		t.Errorf("renamed file: %d bytes, err %v", len(data), err)
	}
	// A hard-linked file keeps its writes when the name it was opened by
	// goes and one link is left.
	if err := os.Link(dir+"/d/b", dir+"/c"); err != nil {
		t.Fatal(err)
	}
	f, err = os.OpenFile(dir+"/c", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir + "/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after unlinking the other link: %v", err)
	}
	data, _ = os.ReadFile(dir + "/d/b")
	if !bytes.HasSuffix(data, []byte("tailmore")) {
		t.Errorf("remaining link lacks the write made through the removed one: ends %q", data[max(0, len(data)-8):])
	}
}

func TestXattrNamespaces(t *testing.T) {
	m, _ := newMountedFS(t)
	path := m.Dir() + "/f"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"user.a", "trusted.b", "security.c"} {
		if err := unix.Setxattr(path, name, []byte("v-"+name), 0); err != nil {
			t.Errorf("setxattr %s: %v", name, err)
			continue
		}
		buf := make([]byte, 64)
		n, err := unix.Getxattr(path, name, buf)
		if err != nil || string(buf[:n]) != "v-"+name {
			t.Errorf("getxattr %s: %q, %v", name, buf[:max(n, 0)], err)
		}
	}
	if _, err := unix.Getxattr(path, "user.a", make([]byte, 2)); err != unix.ERANGE {
		t.Errorf("getxattr into a short buffer: %v, want ERANGE", err)
	}
	buf := make([]byte, 256)
	n, err := unix.Listxattr(path, buf)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	slices.Sort(names)
	if !slices.Equal(names, []string{"security.c", "trusted.b", "user.a"}) {
		t.Errorf("listxattr: %q", names)
	}
	// A valid ACL (user::rw-, group::r--, other::r--, as mode 0644): the
	// kernel checks the format before the file system sees it.
	acl := []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff}
	if err := os.Mkdir(m.Dir()+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, name string }{{path, "system.posix_acl_access"}, {m.Dir() + "/d", "system.posix_acl_default"}} {
		if err := unix.Setxattr(c.path, c.name, acl, 0); err != unix.EOPNOTSUPP {
			t.Errorf("setxattr %s: %v, want EOPNOTSUPP", c.name, err)
		}
		if _, err := unix.Getxattr(c.path, c.name, buf); err != unix.EOPNOTSUPP && err != unix.ENODATA {
			t.Errorf("getxattr %s: %v, want EOPNOTSUPP or ENODATA", c.name, err)
		}
	}
	// security.capability is cached as absent: setting it must show.
	if _, err := unix.Getxattr(path, capabilityXattr, buf); err != unix.ENODATA {
		t.Errorf("getxattr %s of a plain file: %v, want ENODATA", capabilityXattr, err)
	}
	capv := make([]byte, 20) // struct vfs_cap_data, revision 2, no capabilities
	capv[3] = 2
	if err := unix.Setxattr(path, capabilityXattr, capv, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(path, capabilityXattr, buf); err != nil || !bytes.Equal(buf[:n], capv) {
		t.Errorf("getxattr %s after setting it: %x, %v", capabilityXattr, buf[:max(n, 0)], err)
	}
}

func TestFallocateAndSeek(t *testing.T) {
	m, _ := newMountedFS(t)
	f, err := os.Create(m.Dir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 1000, 100000); err != nil {
		t.Fatalf("fallocate mode 0: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 101000 {
		t.Errorf("size after fallocate %d, want 101000", st.Size())
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 500000); err != nil {
		t.Errorf("fallocate KEEP_SIZE: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 101000 {
		t.Errorf("size after fallocate KEEP_SIZE %d, want 101000", st.Size())
	}
	data := bytes.Repeat([]byte{7}, 101000)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 60000, 100000); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	clear(data[60000:])
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Errorf("content after punching a hole differs (%v)", err)
	}
	if st, _ := f.Stat(); st.Size() != 101000 {
		t.Errorf("size after punch %d, want 101000", st.Size())
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096); err != unix.EOPNOTSUPP {
		t.Errorf("fallocate COLLAPSE_RANGE: %v, want EOPNOTSUPP", err)
	}
	if off, err := unix.Seek(fd, 5, unix.SEEK_DATA); err != nil || off != 5 {
		t.Errorf("SEEK_DATA 5: %d, %v", off, err)
	}
	if off, err := unix.Seek(fd, 5, unix.SEEK_HOLE); err != nil || off != 101000 {
		t.Errorf("SEEK_HOLE 5: %d, %v", off, err)
	}
	if _, err := unix.Seek(fd, 101000, unix.SEEK_DATA); err != unix.ENXIO {
		t.Errorf("SEEK_DATA at the end: %v, want ENXIO", err)
	}
}

func TestUtimensNowOmit(t *testing.T) {
	m, _ := newMountedFS(t)
	path := m.Dir() + "/f"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 500, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0); err != nil {
		t.Fatal(err)
	}
	// UTIME_OMIT keeps atime; UTIME_NOW sets mtime to now.
	before := time.Now().Add(-time.Second)
	ts = []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if a := time.Unix(st.Atim.Unix()); !a.Equal(old) {
		t.Errorf("atime %v after UTIME_OMIT, want %v", a, old)
	}
	if mt := time.Unix(st.Mtim.Unix()); mt.Before(before) {
		t.Errorf("mtime %v after UTIME_NOW, want about now", mt)
	}
	// A non-owner with write permission may touch with UTIME_NOW only.
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	err := runAsUser(1001, 1001, func() error {
		return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, 0)
	})
	if err != nil {
		t.Errorf("UTIME_NOW by a writer who is not the owner: %v", err)
	}
	err = runAsUser(1001, 1001, func() error { return utimesNow(path) })
	if err != nil {
		t.Errorf("utimes(NULL) by a writer who is not the owner: %v", err)
	}
	err = runAsUser(1001, 1001, func() error {
		t := unix.NsecToTimespec(old.UnixNano())
		return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{t, t}, 0)
	})
	if err != unix.EPERM {
		t.Errorf("explicit times by a non-owner: %v, want EPERM", err)
	}
}

func TestReadDirOffsets(t *testing.T) {
	m, _ := newMountedFS(t)
	dir := m.Dir() + "/big"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 2500 // several server pages
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	all := readDirents(t, fd)
	if len(all) != n+2 || all[0].name != "." || all[1].name != ".." {
		t.Fatalf("listing: %d entries (want %d), first %v", len(all), n+2, all[:min(2, len(all))])
	}
	seen := map[string]bool{}
	for _, e := range all[2:] {
		if seen[e.name] {
			t.Fatalf("%s listed twice", e.name)
		}
		seen[e.name] = true
	}
	// Seeking to any entry's d_off continues right after it.
	for _, i := range []int{0, 1, 2, 700, 1500, n} {
		if _, err := unix.Seek(fd, all[i].off, 0); err != nil {
			t.Fatal(err)
		}
		rest := readDirents(t, fd)
		if len(rest) != len(all)-i-1 || len(rest) > 0 && rest[0].name != all[i+1].name {
			t.Errorf("after seeking to entry %d's offset: %d entries, want %d", i, len(rest), len(all)-i-1)
		}
	}
}

type dirent struct {
	name string
	off  int64
}

// readDirents reads fd's directory entries to the end with getdents64.
func readDirents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			off := int64(0)
			for i := 7; i >= 0; i-- {
				off = off<<8 | int64(b[8+i])
			}
			name := b[19:reclen]
			name = name[:bytes.IndexByte(name, 0)]
			out = append(out, dirent{string(name), off})
			b = b[reclen:]
		}
	}
}

func TestOpenFlags(t *testing.T) {
	m, _ := newMountedFS(t)
	path := m.Dir() + "/f"
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, os.ErrExist) {
		t.Errorf("O_EXCL of an existing file: %v", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("cd")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if data, _ := os.ReadFile(path); string(data) != "0123456789abcd" {
		t.Errorf("after O_APPEND writes: %q", data)
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Errorf("size after O_TRUNC %d", st.Size())
	}
	f.Close()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("O_DIRECT: %v", err)
	}
	if _, err := unix.Pwrite(fd, []byte("direct"), 0); err != nil {
		t.Errorf("O_DIRECT write: %v", err)
	}
	unix.Close(fd)
	if data, _ := os.ReadFile(path); string(data) != "direct" {
		t.Errorf("after an O_DIRECT write: %q", data)
	}
}

func TestCrossDeviceRename(t *testing.T) {
	m, _ := newMountedFS(t)
	if err := os.WriteFile(m.Dir()+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := os.Rename(m.Dir()+"/f", t.TempDir()+"/f")
	if !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename out of the mount: %v, want EXDEV", err)
	}
}

func TestStatFS(t *testing.T) {
	m, _ := newMountedFS(t)
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks == 0 || st.Bfree > st.Blocks || st.Files == 0 || st.Namelen != 255 || st.Bsize != 4096 {
		t.Errorf("statfs: %+v", st)
	}
}

func TestMountPointChecks(t *testing.T) {
	m, _ := newMountedFS(t)
	err := CheckMountPoint(m.Dir())
	if !errs.Is(err, errs.Busy) || !strings.Contains(err.Error(), "already a mount point") {
		t.Errorf("checking a live mount point: %v", err)
	}
	if !Mounted(m.Dir()) || Stale(m.Dir()) {
		t.Errorf("live mount: Mounted %v, Stale %v", Mounted(m.Dir()), Stale(m.Dir()))
	}
	if _, err := New(m.Dir(), Options{Client: m.fsys.c}); err == nil {
		t.Error("mounting on top of a mount succeeded")
	}
	if err := CheckMountPoint(t.TempDir() + "/missing"); !errs.Is(err, errs.NotExist) {
		t.Errorf("missing mount point: %v", err)
	}
	if err := Unmount(t.TempDir()); err == nil {
		t.Error("unmounting a plain directory succeeded")
	}
}

func TestErrnoTableComplete(t *testing.T) {
	for k := errs.Kind(0); k.Valid(); k++ {
		if _, ok := errnoOf[k]; !ok {
			t.Errorf("kind %d (%s) has no errno", k, k)
		}
	}
	if errno(nil) != 0 || errno(errs.E(errs.NotExist, "x")) != syscall.ENOENT || errno(errors.New("plain")) != syscall.EIO {
		t.Error("errno conversion")
	}
}

func TestParseStatus(t *testing.T) {
	status := []byte("Name:\tx\nUid:\t0\t0\t0\t1001\nGid:\t0\t0\t0\t1002\nGroups:\t4 24 2000 \nNSpid:\t1\n")
	groups, uid, gid, ok := parseStatus(status)
	if !ok || uid != 1001 || gid != 1002 || !slices.Equal(groups, []uint32{4, 24, 2000}) {
		t.Errorf("parseStatus: %v %d %d %v", groups, uid, gid, ok)
	}
	if groups, _, _, ok := parseStatus([]byte("Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\t\n")); !ok || len(groups) != 0 {
		t.Errorf("no groups: %v %v", groups, ok)
	}
	if _, _, _, ok := parseStatus([]byte("Groups:\t1\n")); ok {
		t.Error("a status without Uid and Gid parsed")
	}
}

// TestCallerGroups checks that a request carries the caller's groups: a
// thread with fsuid 1001 and supplementary group 2000 reads a file only
// that group may read.
func TestCallerGroups(t *testing.T) {
	m, _ := newMountedFS(t)
	path := m.Dir() + "/g"
	if err := os.WriteFile(path, []byte("group only"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, 2000); err != nil {
		t.Fatal(err)
	}
	read := func(groups []uint32) error {
		return runAsUserGroups(1001, 1001, groups, func() error {
			_, err := os.ReadFile(path)
			return err
		})
	}
	if err := read([]uint32{2000}); err != nil {
		t.Errorf("read by a member of the file's group: %v", err)
	}
	if err := read(nil); !errors.Is(err, os.ErrPermission) {
		t.Errorf("read by a non-member: %v, want permission denied", err)
	}
}

func TestParseMountInfo(t *testing.T) {
	m, ok := parseMountInfo(`36 35 0:52 / /tmp/a\040b rw,nosuid,nodev shared:1 - fuse.weft weft rw,user_id=0`)
	if !ok || m.point != "/tmp/a b" || m.fstype != "fuse.weft" || m.source != "weft" {
		t.Errorf("parseMountInfo: %+v %v", m, ok)
	}
	if _, ok := parseMountInfo("garbage"); ok {
		t.Error("garbage parsed")
	}
}

// utimesNow is utimensat(path, NULL): both times to now.
func utimesNow(path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(p)), 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

var atFDCWD = unix.AT_FDCWD // a variable: the constant -100 does not convert to uintptr
