package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/search"
)

// buildFindTree makes a tree with split directories, every file type the
// client can make, hard links, extended attributes, and varied sizes,
// modes, owners and times.
func buildFindTree(t testing.TB, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	must(c.MkdirAll(ctx, "/t/big", 0o755))
	must(c.MkdirAll(ctx, "/t/a/b/c", 0o755))
	must(c.Chmod(ctx, "/t/a/b/c", 0o750))
	must(c.MkdirAll(ctx, "/t/private/inner", 0o700))
	must(c.MkdirAll(ctx, "/t/Mixed.Case", 0o755))
	for i := range 60 {
		p := fmt.Sprintf("/t/big/file%02d.txt", i)
		if i%5 == 0 {
			p = fmt.Sprintf("/t/big/Data%02d.BIN", i)
		}
		f, err := c.Create(ctx, p, 0o644)
		must(err)
		_, err = f.Write(make([]byte, i*700))
		must(err)
		must(f.Close())
		switch {
		case i%7 == 0:
			must(c.Chmod(ctx, p, 0o4755))
		case i%7 == 1:
			must(c.Chmod(ctx, p, 0o600))
		case i%7 == 2:
			must(c.Chown(ctx, p, 1000, 100))
		}
		if i%4 == 0 {
			age := time.Duration(i) * 3 * time.Hour
			must(c.Chtimes(ctx, p, now.Add(-age), now.Add(-age)))
		}
		if i%6 == 0 {
			must(c.SetXattrPath(ctx, p, "user.mark", []byte("1"), 0))
		}
	}
	for i, n := range []int{1, 2, 3, 4, 6, 7, 8, 9} {
		must(c.Link(ctx, fmt.Sprintf("/t/big/file%02d.txt", n), fmt.Sprintf("/t/a/b/hard%d", i)))
	}
	must(c.SetXattrPath(ctx, "/t/a/b/hard1", "user.mark", []byte("2"), 0))
	must(c.Symlink(ctx, "../big", "/t/a/link"))
	must(c.Symlink(ctx, "nowhere", "/t/Mixed.Case/dangling"))
	for _, p := range []string{"/t/a/b/c/deep.txt", "/t/private/inner/secret.txt", "/t/Mixed.Case/README"} {
		f, err := c.Create(ctx, p, 0o640)
		must(err)
		must(f.Close())
	}
	must(c.Chown(ctx, "/t/private", 1000, 1000))
	must(c.Chtimes(ctx, "/t/a/b/c", now.Add(-50*time.Hour), now.Add(-50*time.Hour)))
}

// walkFind is the reference: a walk over the client's namespace that
// tests every file with the same query, descending only into directories
// that creds may read and search.
func walkFind(t testing.TB, c *client.Client, ctx context.Context, root string, q *search.Query, uid uint32) []string {
	t.Helper()
	var out []string
	var visit func(p string, a core.Attr)
	visit = func(p string, a core.Attr) {
		if q.MatchAttrs(search.Attrs{Mode: a.Mode, Uid: a.UID, Gid: a.GID, Size: a.Size, MtimeNs: a.Mtime.UnixNano()}, false) &&
			q.MatchName(pathBase(p)) && q.MatchPath(p) && hasXattrs(t, c, ctx, p, a, q.Xattrs) {
			out = append(out, p)
		}
		if !a.IsDir() || uid != 0 && !(a.UID == uid && a.Mode&0o500 == 0o500 || a.UID != uid && a.Mode&0o005 == 0o005) {
			return
		}
		ents, err := c.ReadDir(ctx, p)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		for _, e := range ents {
			cp := strings.TrimSuffix(p, "/") + "/" + e.Name
			ca, err := c.Lstat(ctx, cp)
			if err != nil {
				t.Fatalf("lstat %s: %v", cp, err)
			}
			visit(cp, ca)
		}
	}
	a, err := c.Lstat(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	visit(root, a)
	slices.Sort(out)
	return out
}

func pathBase(p string) string {
	if p == "/" {
		return p
	}
	return p[strings.LastIndexByte(strings.TrimSuffix(p, "/"), '/')+1:]
}

func hasXattrs(t testing.TB, c *client.Client, ctx context.Context, p string, a core.Attr, names []string) bool {
	if len(names) == 0 {
		return true
	}
	if core.IsSymlink(a.Mode) {
		return false
	}
	have, err := c.ListXattrPath(ctx, p)
	if err != nil {
		t.Fatalf("listxattr %s: %v", p, err)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

func clientFind(t testing.TB, c *client.Client, ctx context.Context, root string, q *search.Query) []string {
	t.Helper()
	var out []string
	err := c.Find(ctx, root, q, func(r client.FindResult) error {
		out = append(out, r.Path)
		return nil
	})
	if err != nil {
		t.Fatalf("find %s: %v", root, err)
	}
	slices.Sort(out)
	return out
}

// findCases are find expressions every search test runs.
var findCases = [][]string{
	{"/t"},
	{"/t/big/"},
	{"/t", "-name", "*.txt"},
	{"/t", "-name", "file1?.txt"},
	{"/t", "-name", "hard3"},
	{"/t", "-iname", "data*.bin"},
	{"/t", "-iname", "MIXED.case"},
	{"/t", "-path", "/t/a/*"},
	{"/t", "-path", "*/b/*", "-type", "f"},
	{"/t", "-type", "d"},
	{"/t", "-type", "l"},
	{"/t", "-type", "f,l"},
	{"/t", "-size", "-1k"},
	{"/t", "-size", "+20k"},
	{"/t", "-size", "10k"},
	{"/t", "-size", "+3000c", "-size", "-9000c"},
	{"/t", "-size", "7"},
	{"/t", "-mtime", "0"},
	{"/t", "-mtime", "+1"},
	{"/t", "-mtime", "-2"},
	{"/t", "-mmin", "-30"},
	{"/t", "-mmin", "+600"},
	{"/t", "-newer", "/t/big/file12.txt"},
	{"/t", "-user", "1000"},
	{"/t", "-group", "100"},
	{"/t", "-uid", "0", "-type", "f"},
	{"/t", "-perm", "644"},
	{"/t", "-perm", "-4000"},
	{"/t", "-perm", "/0077", "-type", "f"},
	{"/t", "-perm", "-u=rw,g=r"},
	{"/t", "-perm", "/u+s,g+s"},
	{"/t", "-xattr", "user.mark"},
	{"/t", "-xattr", "user.mark", "-name", "hard*"},
	{"/t/a/b", "-type", "f", "-name", "*"},
	{"/t/big/file01.txt"},
	{"/t/private"},
}

// TestFindMatchesWalk: Client.Find on four meta servers with split
// directories reports what a walk over the namespace with the same tests
// reports, for root and for a user who may not list /t/private.
func TestFindMatchesWalk(t *testing.T) {
	sc := newSearchCluster(t, 4, 16)
	c := sc.c
	buildFindTree(t, c)
	env := search.Env{NowNs: time.Now().UnixNano(), MtimeOf: func(p string) (int64, error) {
		a, err := c.Lstat(context.Background(), p)
		return a.Mtime.UnixNano(), err
	}}
	for _, uid := range []uint32{0, 1001} {
		ctx := client.WithCreds(context.Background(), core.Creds{UID: uid, GID: uid})
		for _, args := range findCases {
			e, err := search.Parse(args, env)
			if err != nil {
				t.Fatalf("parse %q: %v", args, err)
			}
			got := clientFind(t, c, ctx, e.Paths[0], &e.Query)
			want := walkFind(t, c, ctx, e.Paths[0], &e.Query, uid)
			if !slices.Equal(got, want) {
				t.Errorf("uid %d, find %q:\n got %q\nwant %q", uid, args, got, want)
			}
		}
	}
}
