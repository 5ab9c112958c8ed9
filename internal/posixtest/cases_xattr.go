package posixtest

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

// xattrCases: extended attributes in the user namespace.
var xattrCases = []testCase{
	{"Xattr", testXattr},
	{"XattrFlags", testXattrFlags},
	{"XattrRemove", testXattrRemove},
	{"XattrDirAndSymlink", testXattrDirAndSymlink},
}

// userXattrs lists path's user.* attributes, sorted: a local file system
// may add security.* ones of its own.
func userXattrs(t *testing.T, fs FS, path string) []string {
	t.Helper()
	all, err := fs.ListXattr(path)
	must(t, err, "listxattr "+path)
	var out []string
	for _, n := range all {
		if strings.HasPrefix(n, "user.") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func wantXattr(t *testing.T, fs FS, path, name string, want []byte) {
	t.Helper()
	got, err := fs.GetXattr(path, name)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("getxattr %s %s: %q, %v; want %q", path, name, got, err, want)
	}
}

func testXattr(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	if got := userXattrs(t, fs, "/f"); len(got) != 0 {
		t.Errorf("new file has attributes %q", got)
	}
	binary := []byte("a\x00b\xffc")
	must(t, fs.SetXattr("/f", "user.one", []byte("1"), 0), "setxattr")
	must(t, fs.SetXattr("/f", "user.bin", binary, 0), "setxattr binary value")
	must(t, fs.SetXattr("/f", "user.empty", nil, 0), "setxattr empty value")
	wantXattr(t, fs, "/f", "user.one", []byte("1"))
	wantXattr(t, fs, "/f", "user.bin", binary)
	wantXattr(t, fs, "/f", "user.empty", nil)
	if got := userXattrs(t, fs, "/f"); !slices.Equal(got, []string{"user.bin", "user.empty", "user.one"}) {
		t.Errorf("listxattr: %q, want user.bin user.empty user.one", got)
	}
	must(t, fs.SetXattr("/f", "user.one", []byte("uno"), 0), "setxattr over an existing attribute")
	wantXattr(t, fs, "/f", "user.one", []byte("uno"))
	big := bytes.Repeat([]byte("v"), 1000)
	must(t, fs.SetXattr("/f", "user.big", big, 0), "setxattr 1000 bytes")
	wantXattr(t, fs, "/f", "user.big", big)
	_, err := fs.GetXattr("/missing", "user.one")
	wantKind(t, err, errs.NotExist, "getxattr of a missing file")
}

func testXattrFlags(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	wantKind(t, fs.SetXattr("/f", "user.a", []byte("x"), XattrReplace), errs.NoData, "XATTR_REPLACE of a missing attribute")
	_, err := fs.GetXattr("/f", "user.a")
	wantKind(t, err, errs.NoData, "getxattr of a missing attribute")
	must(t, fs.SetXattr("/f", "user.a", []byte("1"), XattrCreate), "XATTR_CREATE of a new attribute")
	wantKind(t, fs.SetXattr("/f", "user.a", []byte("2"), XattrCreate), errs.Exist, "XATTR_CREATE of an existing attribute")
	wantXattr(t, fs, "/f", "user.a", []byte("1"))
	must(t, fs.SetXattr("/f", "user.a", []byte("3"), XattrReplace), "XATTR_REPLACE of an existing attribute")
	wantXattr(t, fs, "/f", "user.a", []byte("3"))
}

func testXattrRemove(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.SetXattr("/f", "user.a", []byte("1"), 0), "setxattr")
	must(t, fs.SetXattr("/f", "user.b", []byte("2"), 0), "setxattr")
	must(t, fs.RemoveXattr("/f", "user.a"), "removexattr")
	_, err := fs.GetXattr("/f", "user.a")
	wantKind(t, err, errs.NoData, "getxattr after removexattr")
	if got := userXattrs(t, fs, "/f"); !slices.Equal(got, []string{"user.b"}) {
		t.Errorf("listxattr after removing user.a: %q, want [user.b]", got)
	}
	wantKind(t, fs.RemoveXattr("/f", "user.a"), errs.NoData, "removexattr of a missing attribute")
	// Attributes go with the inode: a new file at the same name has none.
	must(t, fs.Unlink("/f"), "unlink")
	touch(t, fs, "/f")
	if got := userXattrs(t, fs, "/f"); len(got) != 0 {
		t.Errorf("file recreated at the same name has attributes %q", got)
	}
}

func testXattrDirAndSymlink(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.SetXattr("/d", "user.dir", []byte("d"), 0), "setxattr on a directory")
	wantXattr(t, fs, "/d", "user.dir", []byte("d"))
	// Path calls follow symlinks: the link's target gets the attribute.
	touch(t, fs, "/f")
	must(t, fs.Symlink("f", "/l"), "symlink")
	must(t, fs.SetXattr("/l", "user.via", []byte("link"), 0), "setxattr through a symlink")
	wantXattr(t, fs, "/f", "user.via", []byte("link"))
	if got := userXattrs(t, fs, "/l"); !slices.Equal(got, []string{"user.via"}) {
		t.Errorf("listxattr through a symlink: %q, want [user.via]", got)
	}
	// Hard links share them.
	must(t, fs.Link("/f", "/g"), "link")
	wantXattr(t, fs, "/g", "user.via", []byte("link"))
}
