package meta

import (
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"pgregory.net/rapid"
)

// Requests with missing sub-messages are Invalid, never a panic.
func TestEmptyRequestsAreInvalid(t *testing.T) {
	e := newEnv(t)
	c := rootCreds()
	calls := map[string]func() error{
		"lookup":      func() error { _, err := e.Lookup(ctx, &weftpb.LookupRequest{}); return err },
		"getattr":     func() error { _, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{}); return err },
		"getattr nil": func() error { _, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: c}); return err },
		"setattr":     func() error { _, err := e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: c, Valid: bMode}); return err },
		"create":      func() error { _, err := e.Create(ctx, &weftpb.CreateRequest{}); return err },
		"mkdir":       func() error { _, err := e.Mkdir(ctx, &weftpb.MkdirRequest{}); return err },
		"symlink":     func() error { _, err := e.Symlink(ctx, &weftpb.SymlinkRequest{}); return err },
		"readlink":    func() error { _, err := e.Readlink(ctx, &weftpb.ReadlinkRequest{Creds: c}); return err },
		"unlink":      func() error { _, err := e.Unlink(ctx, &weftpb.UnlinkRequest{}); return err },
		"rmdir":       func() error { _, err := e.Rmdir(ctx, &weftpb.RmdirRequest{}); return err },
		"rename":      func() error { _, err := e.Rename(ctx, &weftpb.RenameRequest{}); return err },
		"link": func() error {
			_, err := e.Link(ctx, &weftpb.LinkRequest{Creds: c, NewParent: root, NewName: "x"})
			return err
		},
		"readdir":    func() error { _, err := e.ReadDir(ctx, &weftpb.ReadDirRequest{}); return err },
		"open":       func() error { _, err := e.Open(ctx, &weftpb.OpenRequest{Creds: c}); return err },
		"open trunc": func() error { _, err := e.Open(ctx, &weftpb.OpenRequest{Creds: c, Flags: oTrunc}); return err },
		"commit":     func() error { _, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: c}); return err },
		"access":     func() error { _, err := e.Access(ctx, &weftpb.AccessRequest{Creds: c}); return err },
		"getxattr":   func() error { _, err := e.GetXattr(ctx, &weftpb.GetXattrRequest{Creds: c, Name: "user.a"}); return err },
		"setxattr":   func() error { _, err := e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: c, Name: "user.a"}); return err },
		"listxattr":  func() error { _, err := e.ListXattr(ctx, &weftpb.ListXattrRequest{Creds: c}); return err },
		"removexattr": func() error {
			_, err := e.RemoveXattr(ctx, &weftpb.RemoveXattrRequest{Creds: c, Name: "user.a"})
			return err
		},
		"nil creds attr": func() error { _, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Node: inoRef(root)}); return err },
		"zero ref": func() error {
			_, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: c, Node: &weftpb.NodeRef{}})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) { wantKind(t, call(), errs.Invalid) })
	}
	// statfs has no arguments to miss.
	if _, err := e.StatFS(ctx, &weftpb.StatFSRequest{}); err != nil {
		t.Fatal(err)
	}
}

// Random requests never panic and always fail with a kind, or succeed.
func TestRandomRequestsDoNotPanic(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Durability = DurabilityAsync })
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	e.create(rootCreds(), d.Ino, "f", 0o644)
	var mu sync.Mutex
	rapid.Check(t, func(rt *rapid.T) {
		mu.Lock()
		defer mu.Unlock()
		ino := rapid.SampledFrom([]uint64{0, root, d.Ino, d.Ino + 1, 1 << 63}).Draw(rt, "ino")
		name := rapid.SampledFrom([]string{"", "f", "g", ".", "..", "a/b", "\x00", "\xff", "d"}).Draw(rt, "name")
		creds := rapid.SampledFrom([]*weftpb.Creds{nil, rootCreds(), alice}).Draw(rt, "creds")
		ref := rapid.SampledFrom([]*weftpb.NodeRef{nil, {}, {Ino: ino}, {Parent: ino, Name: name}, {Parent: ino, Name: name, Ino: ino}}).Draw(rt, "ref")
		u := rapid.Uint32().Draw(rt, "u32")
		b := rapid.SliceOfN(rapid.Byte(), 0, 32).Draw(rt, "bytes")
		var err error
		switch rapid.IntRange(0, 12).Draw(rt, "op") {
		case 0:
			_, err = e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: creds, Node: ref, Valid: u, Mode: u, Size: uint64(u)})
		case 1:
			_, err = e.Create(ctx, &weftpb.CreateRequest{Creds: creds, Parent: ino, Name: name, Mode: u, OpenFlags: u})
		case 2:
			_, err = e.Rename(ctx, &weftpb.RenameRequest{Creds: creds, SrcParent: ino, SrcName: name, DstParent: d.Ino, DstName: "g", Flags: u % 8})
		case 3:
			_, err = e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: creds, Dir: ino, Cookie: b, Limit: u, Plus: true})
		case 4:
			_, err = e.Open(ctx, &weftpb.OpenRequest{Creds: creds, Node: ref, Flags: u})
		case 5:
			_, err = e.Commit(ctx, &weftpb.CommitRequest{Creds: creds, Node: ref, Size: uint64(len(b)), Inline: u%2 == 0, InlineData: b})
		case 6:
			_, err = e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: creds, Node: ref, Name: "user." + name, Value: b, Flags: u % 4})
		case 7:
			_, err = e.Link(ctx, &weftpb.LinkRequest{Creds: creds, Node: ref, NewParent: ino, NewName: name})
		case 8:
			_, err = e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: creds, Parent: ino, Name: name})
		case 9:
			_, err = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: creds, Parent: ino, Name: name, Mode: u})
		case 10:
			_, err = e.Rmdir(ctx, &weftpb.RmdirRequest{Creds: creds, Parent: ino, Name: name})
		case 11:
			_, err = e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: creds, Parent: ino, Name: name, Target: string(b)})
		case 12:
			_, err = e.Access(ctx, &weftpb.AccessRequest{Creds: creds, Node: ref, Mask: u % 9})
		}
		if err != nil && errs.KindOf(err) == errs.Other {
			rt.Fatalf("error without a kind: %v", err)
		}
	})
}
