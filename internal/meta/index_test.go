package meta

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/search"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestIndexRebuiltAtOpen: a store written without the search index (an
// older weft, or NoSearchIndex) is indexed when it opens with the index,
// completely; a server without the index refuses Find and drops the index.
func TestIndexRebuiltAtOpen(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.NoSearchIndex = true })
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	for i := range 30 {
		e.create(rootCreds(), d.Ino, fmt.Sprint("f", i), 0o644)
	}
	f := e.mustLookup(d.Ino, "f1")
	if _, err := e.Link(ctx, &weftpb.LinkRequest{Creds: rootCreds(), Node: fileRef(d.Ino, "f1", f.Ino), NewParent: root, NewName: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: rootCreds(), Node: inoRef(f.Ino), Name: "user.a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Find(ctx, &weftpb.FindRequest{Creds: rootCreds()})
	wantKind(t, err, errs.NotSupported)
	if n := indexKeys(t, e); n != 0 {
		t.Fatalf("%d index keys without the index", n)
	}

	e.cfg.NoSearchIndex = false
	e.reopen()
	problems, err := checkIndexDB(e.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	r, err := e.Find(ctx, &weftpb.FindRequest{Creds: rootCreds(), Phase: weftpb.FindRequest_MATCHES,
		Query: &weftpb.FindQuery{Xattrs: [][]byte{[]byte("user.a")}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hits) != 1 || r.Hits[0].Ino != f.Ino || !r.Eof {
		t.Fatalf("find by xattr after the rebuild: %v", r)
	}

	e.cfg.NoSearchIndex = true
	e.reopen()
	if n := indexKeys(t, e); n != 0 {
		t.Fatalf("%d index keys left after opening without the index", n)
	}
}

// TestFindPagesAndRefusesBadInput: a page holds at most the limit asked
// for, the cursor resumes where it ended, every hit is returned once, and
// bad cursors, phases and queries are refused with Invalid.
func TestFindPagesAndRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	for i := range 25 {
		e.create(rootCreds(), d.Ino, fmt.Sprint("f", i), 0o644)
	}
	seen := map[uint64]int{}
	var cursor []byte
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("no end after 20 pages")
		}
		r, err := e.Find(ctx, &weftpb.FindRequest{Creds: rootCreds(), Phase: weftpb.FindRequest_MATCHES, Cursor: cursor, Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Hits) > 4 {
			t.Fatalf("page of %d hits, limit 4", len(r.Hits))
		}
		for _, h := range r.Hits {
			seen[h.Ino]++
		}
		if r.Eof {
			break
		}
		cursor = r.Cursor
	}
	if len(seen) != 27 { // 25 files, d, and the root
		t.Errorf("%d inodes found, want 27", len(seen))
	}
	for ino, n := range seen {
		if n != 1 {
			t.Errorf("inode %d found %d times", ino, n)
		}
	}
	for _, req := range []*weftpb.FindRequest{
		{Creds: rootCreds(), Phase: weftpb.FindRequest_MATCHES, Cursor: []byte("zz")},
		{Creds: rootCreds(), Phase: weftpb.FindRequest_MATCHES, Cursor: []byte("aNx")},
		{Creds: rootCreds(), Phase: weftpb.FindRequest_POINTERS, Cursor: []byte("x")},
		{Creds: rootCreds(), Phase: 7},
		{Creds: rootCreds(), Query: &weftpb.FindQuery{Perms: []*weftpb.FindPerm{{Kind: 9}}}},
		{Creds: rootCreds(), Query: &weftpb.FindQuery{Xattrs: [][]byte{nil}}},
		{Creds: rootCreds(), Query: &weftpb.FindQuery{Uids: make([]uint32, 65)}},
	} {
		_, err := e.Find(ctx, req)
		wantKind(t, err, errs.Invalid)
	}
}

func indexKeys(t *testing.T, e *env) int {
	t.Helper()
	start, end := layout.TagRange(layout.TagIndex)
	it, err := e.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.SeekGE(start); it.Valid() && string(it.Key()) < string(end); it.Next() {
		n++
	}
	return n
}

// TestIndexDecodersMatchProto: the index's own decoders read what
// proto.Unmarshal reads, for random records, so the index keys they give
// are those the records' decoded fields give.
func TestIndexDecodersMatchProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := func(label string) *weftpb.InodeRecord {
			return &weftpb.InodeRecord{
				Mode:       rapid.SampledFrom([]uint32{0o100644, 0o40755, 0o120777, 0o10600}).Draw(t, label+"mode"),
				Nlink:      rapid.Uint32Range(0, 9).Draw(t, label+"nlink"),
				Uid:        rapid.Uint32().Draw(t, label+"uid"),
				Gid:        rapid.Uint32().Draw(t, label+"gid"),
				Size:       rapid.Uint64().Draw(t, label+"size"),
				MtimeNs:    rapid.Int64().Draw(t, label+"mtime"),
				CtimeNs:    rapid.Int64().Draw(t, label+"ctime"),
				Inline:     rapid.Bool().Draw(t, label+"inline"),
				InlineData: rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, label+"data"),
				Symlink:    rapid.SliceOfN(rapid.Byte(), 0, 10).Draw(t, label+"target"),
				Parent:     rapid.Uint64().Draw(t, label+"parent"),
				Radix:      rapid.Uint32Range(0, 3).Draw(t, label+"radix"),
				Bitmap:     rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, label+"bitmap"),
				Links:      []*weftpb.LinkRef{{Parent: 5, Name: []byte("x")}},
				Stub:       rapid.Bool().Draw(t, label+"stub"),
			}
		}
		want := func(r *weftpb.InodeRecord) layout.IndexAttr {
			a := attrOf(0, r)
			return layout.IndexAttr{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, Nlink: a.Nlink, Size: a.Size, MtimeNs: a.MtimeNs, CtimeNs: a.CtimeNs}
		}
		r := rec("r.")
		var got indexRecord
		if !decodeIndexRecord(mustMarshal(r), &got) {
			t.Fatal("record refused")
		}
		if got.finish() != want(r) || got.parent != core.Ino(r.Parent) || got.stub != r.Stub || isSplitBitmap(got.bitmap) != isSplit(r) {
			t.Fatalf("record %v: decoded %+v", r, got)
		}
		e := &weftpb.EntryRecord{Ino: rapid.Uint64().Draw(t, "ino"), Mode: rapid.Uint32().Draw(t, "emode")}
		if rapid.Bool().Draw(t, "embedded") {
			e.Attr = rec("a.")
		}
		ino, mode, attr, hasAttr, ok := decodeIndexEntry(mustMarshal(e))
		if !ok || ino != core.Ino(e.Ino) || mode != e.Mode || hasAttr != (e.Attr != nil) || hasAttr && attr.finish() != want(e.Attr) {
			t.Fatalf("entry %v: decoded %v %v %+v %v %v", e, ino, mode, attr, hasAttr, ok)
		}
	})
}

// TestFindNarrowsPatternsByLiteralEnds: a -name pattern with a literal
// start or end reads only the by-name or by-reversed-name keys that have
// it, and still finds exactly the files it matches, across pages.
func TestFindNarrowsPatternsByLiteralEnds(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	var names []string
	for i := range 120 {
		names = append(names, fmt.Sprintf("f%04d", i*7), fmt.Sprintf("g%d.c", i))
	}
	for _, n := range names {
		e.create(rootCreds(), d.Ino, n, 0o644)
	}
	for _, pat := range []string{"f??00", "*.c", "g1*", "*7", "f00[1-3]?", "[fg]*0", "*", "g\\1.c"} {
		g := search.Glob{Pattern: pat}
		want := map[string]bool{}
		for _, n := range names {
			if g.Match(n) {
				want[n] = true
			}
		}
		got := map[string]bool{}
		var cursor []byte
		for pages := 0; ; pages++ {
			if pages > 200 {
				t.Fatalf("%q: no end after 200 pages", pat)
			}
			r, err := e.Find(ctx, &weftpb.FindRequest{Creds: rootCreds(), Phase: weftpb.FindRequest_MATCHES, Cursor: cursor, Limit: 3,
				Query: &weftpb.FindQuery{Names: []*weftpb.FindGlob{{Pattern: []byte(pat)}}}})
			if err != nil {
				t.Fatalf("%q: %v", pat, err)
			}
			for _, h := range r.Hits {
				if len(h.Name) > 0 {
					if got[string(h.Name)] {
						t.Errorf("%q: %s found twice", pat, h.Name)
					}
					got[string(h.Name)] = true
				}
			}
			if r.Eof {
				break
			}
			cursor = r.Cursor
		}
		if !maps.Equal(got, want) {
			t.Errorf("%q: found %d names %v, want %d", pat, len(got), slices.Sorted(maps.Keys(got)), len(want))
		}
	}
	if g, kind, part := nameDriven([]search.Glob{{Pattern: "f???0000"}}); kind != stageByEnd || part != "0000" || g.Pattern != "f???0000" {
		t.Errorf("f???0000 is read by %c %q, want by its end 0000", kind, part)
	}
}
