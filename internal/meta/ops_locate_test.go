package meta

import (
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

// Locate finds a one-link file's entry wherever a rename took it, and
// nothing once it is unlinked.
func TestLocate(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	f := e.create(alice, root, "f", 0o644)
	where := func() *weftpb.LocateReply {
		t.Helper()
		r, err := e.Locate(ctx, &weftpb.LocateRequest{Ino: f.Ino})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := where(); !r.Found || r.Node.Parent != root || r.Node.Name != "f" {
		t.Fatalf("locate after create: %+v", r)
	}
	if _, err := e.rename(alice, root, "f", root, "g", 0); err != nil {
		t.Fatal(err)
	}
	if r := where(); !r.Found || r.Node.Parent != root || r.Node.Name != "g" || r.Node.Ino != f.Ino {
		t.Fatalf("locate after rename: %+v", r)
	}
	if _, err := e.unlink(alice, root, "g"); err != nil {
		t.Fatal(err)
	}
	if r := where(); r.Found {
		t.Fatalf("locate after unlink: %+v", r)
	}
	if _, err := e.Locate(ctx, &weftpb.LocateRequest{}); err == nil {
		t.Error("locate of inode 0: no error")
	}
}
