package client

import (
	"context"
	"sync"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/patchgroup"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Patchgroups in the client (internal/patchgroup has the graph and the
// barrier): which groups a change belongs to, and what making a group's
// changes durable takes here. In sync durability the barrier only flushes
// the files written (metadata was durable when acknowledged); in async
// durability it also asks each meta server changed to sync its WAL.

// Patchgroup is a set of changes with ordering constraints.
type Patchgroup = patchgroup.Group

// pgState is a client's patchgroups engaged for all its calls (the library
// API); a context can name others (WithPatchgroups).
type pgState struct {
	mu struct {
		sync.Mutex
		next    uint64
		engaged []*Patchgroup
	}
}

// NewPatchgroup creates an empty group (pg_create).
func (c *Client) NewPatchgroup() *Patchgroup {
	c.pgs.mu.Lock()
	c.pgs.mu.next++
	id := c.pgs.mu.next
	c.pgs.mu.Unlock()
	return patchgroup.New(id, pgSyncer{c})
}

// Engage makes pg collect the changes this client makes until Disengage
// (contexts that name their own groups aside).
func (c *Client) Engage(pg *Patchgroup) error {
	if err := pg.Engage(); err != nil {
		return err
	}
	c.pgs.mu.Lock()
	c.pgs.mu.engaged = append(c.pgs.mu.engaged, pg)
	c.pgs.mu.Unlock()
	return nil
}

// Disengage ends one Engage of pg.
func (c *Client) Disengage(pg *Patchgroup) error {
	c.pgs.mu.Lock()
	defer c.pgs.mu.Unlock()
	for i, g := range c.pgs.mu.engaged {
		if g == pg {
			c.pgs.mu.engaged = append(c.pgs.mu.engaged[:i:i], c.pgs.mu.engaged[i+1:]...)
			pg.Disengage()
			return nil
		}
	}
	return errs.New(errs.Invalid, "patchgroup disengage", "group %d is not engaged", pg.ID())
}

type pgKey struct{}

// WithPatchgroups returns ctx whose changes belong to groups (and not to the
// groups engaged client-wide): a mount passes each process's.
func WithPatchgroups(ctx context.Context, groups []*Patchgroup) context.Context {
	return context.WithValue(ctx, pgKey{}, groups)
}

// groupsFor returns the groups a change made under ctx belongs to.
func (c *Client) groupsFor(ctx context.Context) []*Patchgroup {
	if gs, ok := ctx.Value(pgKey{}).([]*Patchgroup); ok {
		return gs
	}
	c.pgs.mu.Lock()
	defer c.pgs.mu.Unlock()
	if len(c.pgs.mu.engaged) == 0 {
		return nil
	}
	return append([]*Patchgroup(nil), c.pgs.mu.engaged...)
}

// beforeMeta runs the barrier for a metadata change under ctx, and returns
// what records it once sent to p.
func (c *Client) beforeMeta(ctx context.Context, p *rpc.Peer) (after func(), err error) {
	groups := c.groupsFor(ctx)
	if len(groups) == 0 {
		return func() {}, nil
	}
	if err := patchgroup.Barrier(ctx, groups); err != nil {
		return nil, err
	}
	return func() { patchgroup.NoteMeta(groups, c.metaIndex(p)) }, nil
}

// orderWrite runs the barrier for data written to f under ctx, and records
// the file in its groups.
func (f *File) orderWrite(ctx context.Context) error {
	groups := f.c.groupsFor(ctx)
	if len(groups) == 0 {
		return nil
	}
	if err := patchgroup.Barrier(ctx, groups); err != nil {
		return err
	}
	patchgroup.NoteData(groups, f.n.ino)
	return nil
}

// metaIndex is p's meta server index.
func (c *Client) metaIndex(p *rpc.Peer) int {
	for i, m := range c.metas {
		if m == p {
			return i
		}
	}
	return 0
}

// pgSyncer makes a group's changes durable.
type pgSyncer struct{ c *Client }

func (s pgSyncer) SyncChanges(ctx context.Context, ch patchgroup.Changes) error {
	c := s.c
	// What this sends (flushes, commits) belongs to no group.
	ctx = WithPatchgroups(ctx, nil)
	// Queued metadata first: a queued create must reach its server before
	// its file's commit, and the meta sync below covers both.
	for _, dir := range ch.Dirs {
		if err := c.SyncDir(ctx, dir); err != nil {
			return err
		}
	}
	// Data first: a file's flush commits its size, which the meta sync
	// below then makes durable too. A file still open here is flushed and
	// synced; one closed was flushed at its close and, unless that close
	// synced it, the stores sync what they hold (one request each, however
	// many files).
	closed := false
	for _, ino := range ch.Inos {
		c.mu.Lock()
		n := c.mu.open[ino]
		c.mu.Unlock()
		if n == nil {
			closed = true
			continue
		}
		if err := n.flush(ctx, true); err != nil {
			return err
		}
	}
	if closed && c.cfg.WriteBack {
		// A closed file's commit may wait in the write-back queue of its
		// directory (writeback_data.go), which the group may not name
		// (the close ran outside it): every queue goes.
		if err := c.SyncAll(ctx); err != nil {
			return err
		}
	}
	if c.cfg.SyncOnClose {
		return nil
	}
	if closed {
		if err := c.syncAllStores(ctx); err != nil {
			return err
		}
	}
	metas := make([]*rpc.Peer, 0, len(ch.Metas))
	for _, i := range ch.Metas {
		metas = append(metas, c.metas[i])
	}
	if len(ch.Inos) > 0 || len(ch.Dirs) > 0 {
		metas = c.metas // where each flush or batch went is the route's business
	}
	return c.syncMetas(ctx, metas)
}

// syncAllStores makes every chunk each store holds durable.
func (c *Client) syncAllStores(ctx context.Context) error {
	return c.onStores(allStores(len(c.stores)), func(s int) error {
		return c.callIdempotent(ctx, c.stores[s], pb.MethodSyncStore, &pb.SyncStoreRequest{}, &pb.Empty{})
	})
}

// syncMetas asks each of metas (duplicates allowed) to make what it
// acknowledged durable.
func (c *Client) syncMetas(ctx context.Context, metas []*rpc.Peer) error {
	seen := map[*rpc.Peer]bool{}
	errc := make(chan error, len(metas))
	n := 0
	for _, p := range metas {
		if seen[p] {
			continue
		}
		seen[p] = true
		n++
		go func() { errc <- c.callIdempotent(ctx, p, pb.MethodSyncMeta, &pb.SyncMetaRequest{}, &pb.Empty{}) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// SyncNamespace makes every metadata change this client's servers
// acknowledged durable: fsync of a directory. With sync durability they
// are already.
func (c *Client) SyncNamespace(ctx context.Context) error {
	if err := c.syncEdgeHeld(ctx); err != nil {
		return err
	}
	if c.cfg.SyncOnClose {
		return nil
	}
	return c.syncMetas(ctx, c.metas)
}

// mutating lists the metadata methods that change something.
var mutating = map[uint16]bool{
	pb.MethodSetAttr: true, pb.MethodCreate: true, pb.MethodMkdir: true, pb.MethodSymlink: true,
	pb.MethodUnlink: true, pb.MethodRmdir: true, pb.MethodRename: true, pb.MethodLink: true,
	pb.MethodSetXattr: true, pb.MethodRemoveXattr: true,
	// Not Commit: a flush's commit carries what writes changed, and each
	// write went through the barrier (File.orderWrite).
}
