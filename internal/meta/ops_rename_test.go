package meta

import (
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func (e *env) rename(c *weftpb.Creds, sp uint64, sn string, dp uint64, dn string, flags uint32) (*weftpb.RenameReply, error) {
	return e.Rename(ctx, &weftpb.RenameRequest{Creds: c, SrcParent: sp, SrcName: sn, DstParent: dp, DstName: dn, Flags: flags})
}

func TestRenameFile(t *testing.T) {
	e := newEnv(t)
	a := e.mkdir(rootCreds(), root, "a", 0o755)
	b := e.mkdir(rootCreds(), root, "b", 0o755)
	f := e.create(rootCreds(), a.Ino, "f", 0o644)
	e.clock.Advance()
	r := must[*weftpb.RenameReply](t)(e.rename(rootCreds(), a.Ino, "f", b.Ino, "g", 0))
	if r.Replaced != nil {
		t.Fatalf("replaced %+v", r.Replaced)
	}
	g := e.mustLookup(b.Ino, "g")
	now := e.clock.Now().UnixNano()
	if g.Ino != f.Ino || g.CtimeNs != now {
		t.Fatalf("moved file %+v", g)
	}
	if _, err := e.lookup(rootCreds(), a.Ino, "f"); !errs.Is(err, errs.NotExist) {
		t.Fatalf("old name: %v", err)
	}
	for _, d := range []uint64{a.Ino, b.Ino} {
		if at := e.getattr(d); at.MtimeNs != now || at.CtimeNs != now || at.Nlink != 2 {
			t.Fatalf("parent %d after rename %+v", d, at)
		}
	}
	// Replacing a chunked file frees it; replacing an inline one does not.
	e.create(rootCreds(), b.Ino, "chunked", 0o644)
	c := e.mustLookup(b.Ino, "chunked")
	must[*weftpb.CommitReply](t)(e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(b.Ino, "chunked", c.Ino), Size: 9000}))
	r = must[*weftpb.RenameReply](t)(e.rename(rootCreds(), b.Ino, "g", b.Ino, "chunked", 0))
	if r.Replaced == nil || r.Replaced.Ino != c.Ino || !r.Freed {
		t.Fatalf("replace chunked: %+v", r)
	}
	if got := e.names(b.Ino); len(got) != 1 || got[0] != "chunked" {
		t.Fatalf("b lists %v", got)
	}
	if e.mustLookup(b.Ino, "chunked").Ino != f.Ino {
		t.Fatal("target does not name the moved file")
	}
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != 4 {
		t.Fatalf("files %d, want 4", st.Files)
	}
}

func TestRenameErrors(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	full := e.mkdir(rootCreds(), root, "full", 0o755)
	e.create(rootCreds(), full.Ino, "x", 0o644)
	e.mkdir(rootCreds(), root, "empty", 0o755)
	e.create(rootCreds(), root, "f", 0o644)
	sub := e.mkdir(rootCreds(), d.Ino, "sub", 0o755)
	cases := []struct {
		name     string
		sp       uint64
		sn       string
		dp       uint64
		dn       string
		flags    uint32
		kind     errs.Kind
		asCreds  *weftpb.Creds
		skipRoot bool
	}{
		{"missing source", root, "nope", root, "x", 0, errs.NotExist, nil, false},
		{"dir over file", root, "d", root, "f", 0, errs.NotDir, nil, false},
		{"file over dir", root, "f", root, "empty", 0, errs.IsDir, nil, false},
		{"over non-empty dir", root, "d", root, "full", 0, errs.NotEmpty, nil, false},
		{"noreplace", root, "f", root, "d", renameNoReplace, errs.Exist, nil, false},
		{"exchange missing", root, "f", root, "nope", renameExchange, errs.NotExist, nil, false},
		{"both flags", root, "f", root, "g", renameExchange | renameNoReplace, errs.Invalid, nil, false},
		{"unknown flag", root, "f", root, "g", 4, errs.Invalid, nil, false},
		{"dir into itself", root, "d", d.Ino, "x", 0, errs.Invalid, nil, false},
		{"dir into descendant", root, "d", sub.Ino, "x", 0, errs.Invalid, nil, false},
		{"exchange dir into descendant", root, "d", sub.Ino, "y", renameExchange, errs.NotExist, nil, false},
		{"no write on parent", root, "f", root, "g", 0, errs.Permission, alice, false},
		{"dot", root, ".", root, "g", 0, errs.Invalid, nil, false},
		{"dst dotdot", root, "f", root, "..", 0, errs.Invalid, nil, false},
		{"dst parent is file", root, "f", 424242, "g", 0, errs.Stale, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			creds := c.asCreds
			if creds == nil {
				creds = rootCreds()
			}
			_, err := e.rename(creds, c.sp, c.sn, c.dp, c.dn, c.flags)
			wantKind(t, err, c.kind)
		})
	}
	// Exchanging a directory with a file inside it would put it under itself.
	e.create(rootCreds(), sub.Ino, "y", 0o644)
	_, err := e.rename(rootCreds(), root, "d", sub.Ino, "y", renameExchange)
	wantKind(t, err, errs.Invalid)
	// Nothing changed.
	if got := len(e.names(root)); got != 4 {
		t.Fatalf("root has %d names", got)
	}
}

func TestRenameReplacesEmptyDir(t *testing.T) {
	e := newEnv(t)
	a := e.mkdir(rootCreds(), root, "a", 0o755)
	src := e.mkdir(rootCreds(), root, "src", 0o755)
	e.create(rootCreds(), src.Ino, "inside", 0o644)
	old := e.mkdir(rootCreds(), a.Ino, "old", 0o755)
	r := must[*weftpb.RenameReply](t)(e.rename(rootCreds(), root, "src", a.Ino, "old", 0))
	if r.Replaced == nil || r.Replaced.Ino != old.Ino || r.Freed {
		t.Fatalf("replace dir: %+v", r)
	}
	if e.hasInodeRecord(old.Ino) {
		t.Fatal("replaced directory's record remains")
	}
	moved := e.mustLookup(a.Ino, "old")
	if moved.Ino != src.Ino {
		t.Fatalf("a/old is %d, want %d", moved.Ino, src.Ino)
	}
	if n := e.getattr(a.Ino).Nlink; n != 3 {
		t.Fatalf("a nlink %d, want 3", n)
	}
	if n := e.getattr(root).Nlink; n != 3 {
		t.Fatalf("root nlink %d, want 3", n)
	}
	// The moved directory's parent pointer follows: moving a under its own
	// child is refused.
	_, err := e.rename(rootCreds(), root, "a", src.Ino, "x", 0)
	wantKind(t, err, errs.Invalid)
	if e.mustLookup(src.Ino, "inside").Ino == 0 {
		t.Fatal("content lost")
	}
}

func TestRenameExchange(t *testing.T) {
	e := newEnv(t)
	a := e.mkdir(rootCreds(), root, "a", 0o755)
	b := e.mkdir(rootCreds(), root, "b", 0o755)
	f := e.create(rootCreds(), a.Ino, "f", 0o644)
	sub := e.mkdir(rootCreds(), b.Ino, "sub", 0o755)
	must[*weftpb.RenameReply](t)(e.rename(rootCreds(), a.Ino, "f", b.Ino, "sub", renameExchange))
	if got := e.mustLookup(a.Ino, "f"); got.Ino != sub.Ino || !core.IsDir(got.Mode) {
		t.Fatalf("a/f %+v", got)
	}
	if got := e.mustLookup(b.Ino, "sub"); got.Ino != f.Ino {
		t.Fatalf("b/sub %+v", got)
	}
	if na, nb := e.getattr(a.Ino).Nlink, e.getattr(b.Ino).Nlink; na != 3 || nb != 2 {
		t.Fatalf("nlink a %d b %d, want 3 2", na, nb)
	}
	// The directory's parent is now a: moving a into it is refused.
	_, err := e.rename(rootCreds(), root, "a", sub.Ino, "x", 0)
	wantKind(t, err, errs.Invalid)
	// Exchange within one directory.
	e.create(rootCreds(), a.Ino, "g", 0o600)
	must[*weftpb.RenameReply](t)(e.rename(rootCreds(), a.Ino, "f", a.Ino, "g", renameExchange))
	if got := e.mustLookup(a.Ino, "g"); got.Ino != sub.Ino {
		t.Fatalf("a/g %+v", got)
	}
	if got := e.mustLookup(a.Ino, "f"); got.Mode != core.ModeFile|0o600 {
		t.Fatalf("a/f %+v", got)
	}
}

func TestRenameSameInodeIsNoop(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootCreds(), root, "f", 0o644)
	must[*weftpb.LinkReply](t)(e.Link(ctx, &weftpb.LinkRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino), NewParent: root, NewName: "g"}))
	r := must[*weftpb.RenameReply](t)(e.rename(rootCreds(), root, "f", root, "g", 0))
	if r.Replaced != nil {
		t.Fatalf("replaced %+v", r.Replaced)
	}
	if got := e.names(root); len(got) != 2 {
		t.Fatalf("names %v: both links must remain", got)
	}
	must[*weftpb.RenameReply](t)(e.rename(rootCreds(), root, "f", root, "f", 0))
	if e.getattr(f.Ino).Nlink != 2 {
		t.Fatal("nlink changed")
	}
}

func TestRenameDirNeedsWriteOnIt(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	a := e.mkdir(alice, root, "a", 0o777)
	d := e.mkdir(bob, root, "d", 0o555) // bob's dir, not writable even by bob
	_, err := e.rename(alice, root, "d", a.Ino, "d", 0)
	wantKind(t, err, errs.Permission)
	_, err = e.rename(bob, root, "d", a.Ino, "d", 0)
	wantKind(t, err, errs.Permission)
	// Within one parent ".." does not change: allowed.
	must[*weftpb.RenameReply](t)(e.rename(bob, root, "d", root, "d2", 0))
	must[*weftpb.RenameReply](t)(e.rename(rootCreds(), root, "d2", a.Ino, "d", 0))
	if got := e.getattr(d.Ino); got.Nlink != 2 {
		t.Fatalf("moved dir %+v", got)
	}
}

// Two concurrent moves, x into y and y into x, must not both succeed (that
// would detach a loop from the tree).
func TestConcurrentCrossingDirMoves(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		x := e.mkdir(rootCreds(), root, "x"+itoa(i), 0o755)
		y := e.mkdir(rootCreds(), root, "y"+itoa(i), 0o755)
		var wg sync.WaitGroup
		var errX, errY error
		wg.Add(2)
		go func() { defer wg.Done(); _, errX = e.rename(rootCreds(), root, "x"+itoa(i), y.Ino, "x", 0) }()
		go func() { defer wg.Done(); _, errY = e.rename(rootCreds(), root, "y"+itoa(i), x.Ino, "y", 0) }()
		wg.Wait()
		if (errX == nil) == (errY == nil) {
			t.Fatalf("round %d: x->y %v, y->x %v: exactly one must succeed", i, errX, errY)
		}
		for _, err := range []error{errX, errY} {
			if err != nil && !errs.Is(err, errs.Invalid) {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
}

// Crossing moves whose parents share no lock (A/x into y's subtree, B/y into
// x's subtree) are kept apart by renameMu: the hook holds each move just
// after its ancestry check, long enough for the other to pass its own check
// if nothing serialized them.
func TestCrossingDirMovesWithDisjointLocks(t *testing.T) {
	e := newEnv(t)
	a := e.mkdir(rootCreds(), root, "A", 0o755)
	b := e.mkdir(rootCreds(), root, "B", 0o755)
	x := e.mkdir(rootCreds(), a.Ino, "x", 0o755)
	y := e.mkdir(rootCreds(), b.Ino, "y", 0o755)
	xs := e.mkdir(rootCreds(), x.Ino, "xs", 0o755)
	ys := e.mkdir(rootCreds(), y.Ino, "ys", 0o755)
	e.hookAncestryChecked = func() { time.Sleep(100 * time.Millisecond) }
	var wg sync.WaitGroup
	var err1, err2 error
	wg.Add(2)
	go func() { defer wg.Done(); _, err1 = e.rename(rootCreds(), a.Ino, "x", ys.Ino, "x", 0) }()
	go func() { defer wg.Done(); _, err2 = e.rename(rootCreds(), b.Ino, "y", xs.Ino, "y", 0) }()
	wg.Wait()
	if err1 == nil && err2 == nil {
		t.Fatal("both crossing moves succeeded: x and y now form a detached loop")
	}
	if (err1 != nil && !errs.Is(err1, errs.Invalid)) || (err2 != nil && !errs.Is(err2, errs.Invalid)) {
		t.Fatalf("errors %v, %v", err1, err2)
	}
}
