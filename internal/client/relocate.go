package client

import (
	"context"
	"sync"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Open files renamed by another client. A one-link file's attributes live
// in its entry, so the client addresses an open file by (parent, name,
// ino), the name it was opened under; its own renames re-point it
// (renameOpen), another client's do not. A request about such a file that
// the server answers NotExist or Stale (the name is gone, or holds another
// inode now) asks every meta server where its index holds the inode's
// entry, re-points the open state there and tries again: a commit at close,
// a refresh after a recall, a getattr through the descriptor all reach the
// file wherever it went, as a local descriptor would. A file no server
// holds was unlinked: NotExist, also where the server said Stale (its name
// holds another file now), which would tell the caller to look the name up
// again, while it is the file that is gone.

type byNameKey struct{}

// ByName marks the calls of ctx as reaching their node by the name the
// caller gave (an open or a chmod by path), not through an open file, so
// that they never follow a file open here that another client moved away
// from that name: the server's ESTALE then makes the kernel look the name
// up again.
func ByName(ctx context.Context) context.Context {
	return context.WithValue(ctx, byNameKey{}, true)
}

func isByName(ctx context.Context) bool { return ctx.Value(byNameKey{}) != nil }

// maxRelocations bounds the tries of one request whose file keeps moving.
const maxRelocations = 3

// relocatable reports the errors of a request whose name no longer reaches
// the node it named.
func relocatable(err error) bool {
	return errs.Is(err, errs.NotExist) || errs.Is(err, errs.Stale)
}

// relocation is what relocateOpen found.
type relocation int

const (
	notOpen relocation = iota // not open here: the error stands
	moved                     // found under another name
	gone                      // open here, but no server holds an entry for it
)

// relocateOpen finds where open file ref.Ino's entry is now, if it is open
// here and a request through ref was refused: it re-points the open state
// (unless something re-pointed it meanwhile) and returns the new ref, which
// may be ref itself when the file came back there.
func (c *Client) relocateOpen(ctx context.Context, ref Ref) (Ref, relocation) {
	n := c.lookupOpen(ref.Ino)
	if n == nil {
		return Ref{}, notOpen
	}
	defer c.releaseOpen(n)
	if c.beforeLocate != nil {
		c.beforeLocate(ref.Ino)
	}
	to, found := c.locate(ctx, ref.Ino)
	if !found {
		return Ref{}, gone
	}
	// Found where the refused request went: another client moved the
	// file away and back between the server's answer and locate (b/x to
	// b/y and back). The file was never gone; the request goes there
	// again (callRef bounds the tries). Taking this as the server's last
	// word failed a commit at close with ENOENT (TestLinzTwoSites).
	n.mu.Lock()
	if r := n.mu.ref; r.Parent == ref.Parent && r.Name == ref.Name {
		n.mu.ref = to
	}
	n.mu.Unlock()
	c.log.Debug("an open file moved: found it again", "ino", ref.Ino, "parent", to.Parent, "name", to.Name)
	return to, moved
}

// locate asks every meta server where it holds ino's entry (method
// locate); at most one does, but a rename across servers in progress may
// leave it on two for a moment: any answer is tried, and the server checks
// it again.
func (c *Client) locate(ctx context.Context, ino core.Ino) (Ref, bool) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		found *pb.NodeRef
	)
	for _, m := range c.metas {
		wg.Go(func() {
			var r pb.LocateReply
			if err := c.callIdempotent(ctx, m, pb.MethodLocate, &pb.LocateRequest{Ino: uint64(ino)}, &r); err != nil || !r.Found || r.Node == nil {
				return
			}
			mu.Lock()
			found = r.Node
			mu.Unlock()
		})
	}
	wg.Wait()
	if found == nil || found.Parent == 0 || found.Name == "" {
		return Ref{}, false
	}
	return Ref{Ino: ino, Parent: core.Ino(found.Parent), Name: found.Name}, true
}

// OpenIn returns the inodes open here whose open state addresses them
// through an entry in dir: a recall of dir's lease may concern them even
// where the layer above knows them by another name (one another client
// renamed).
func (c *Client) OpenIn(dir core.Ino) []core.Ino {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []core.Ino
	for ino, n := range c.mu.open {
		n.mu.Lock()
		if n.mu.ref.Parent == dir {
			out = append(out, ino)
		}
		n.mu.Unlock()
	}
	return out
}

// OpenPlace returns where the client addresses file ino, open here and
// not removed by this client: the name it was opened under, or the one it
// followed it to (another client's rename is found when a request through
// the old name is refused). For a layer that lost the file's name itself:
// go-fuse unlinks a node from its name when a rename of this mount
// replaces that name, while the open file lives on under another name
// that another client gave it.
func (c *Client) OpenPlace(ino core.Ino) (Ref, bool) {
	n := c.lookupOpen(ino)
	if n == nil {
		return Ref{}, false
	}
	defer c.releaseOpen(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.freed || n.mu.ref.Parent == 0 || n.mu.ref.Name == "" {
		return Ref{}, false
	}
	return n.mu.ref, true
}

// OpenMoved opens the file ref names wherever another client moved it
// since ref was right: for a caller that found ref's name holding the
// file during the call it serves (the kernel's retry of an open that the
// mount answered ESTALE, fusefs retry.go), as a local open opens the inode
// its path walk found even if the name changes before the open. Unlike
// OpenRef, a name that no longer holds the file (NotExist, Stale) is not
// the answer: the file's entry is located and opened there. A file no
// server holds an entry for was removed: the name's error stands (NotExist
// if the name is gone too; Stale if it holds another file, which the
// caller cannot open through this file's handle, and an ENOENT would say
// the name was absent, which it never was).
func (c *Client) OpenMoved(ctx context.Context, ref Ref, flags int) (*File, error) {
	f, err := c.OpenRef(ctx, ref, flags)
	for range maxRelocations {
		if !relocatable(err) || ref.Ino == 0 {
			return f, err
		}
		to, found := c.locate(ctx, ref.Ino)
		if !found {
			return nil, err
		}
		ref = to
		f, err = c.OpenRef(ctx, ref, flags)
	}
	return f, err
}
