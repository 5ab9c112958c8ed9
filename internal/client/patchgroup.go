package client

import (
	"context"
	"sync"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
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
		// names of files written under a group and not yet synced, so
		// that a barrier can make one durable after its last close
		// (kept current across renames)
		names map[core.Ino]Ref
	}
}

// maxPGNames bounds the names kept; past it a file's data is synced at the
// barrier only while it is open here (a closed one reports an error).
const maxPGNames = 1 << 20

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
	c := f.c
	c.pgs.mu.Lock()
	if c.pgs.mu.names == nil {
		c.pgs.mu.names = map[core.Ino]Ref{}
	}
	if len(c.pgs.mu.names) < maxPGNames {
		c.pgs.mu.names[f.n.ino] = f.Ref()
	}
	c.pgs.mu.Unlock()
	return nil
}

// pgRenamed keeps the names of files written under groups current.
func (c *Client) pgRenamed(srcParent core.Ino, srcName string, dstParent core.Ino, dstName string) {
	c.pgs.mu.Lock()
	defer c.pgs.mu.Unlock()
	for ino, r := range c.pgs.mu.names {
		if r.Parent == srcParent && r.Name == srcName {
			c.pgs.mu.names[ino] = Ref{Ino: ino, Parent: dstParent, Name: dstName}
		}
	}
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
	// Data first: a file's flush commits its size, which the meta sync
	// below then makes durable too.
	for _, ino := range ch.Inos {
		if err := c.syncData(ctx, ino); err != nil {
			return err
		}
	}
	if c.cfg.SyncOnClose {
		return nil
	}
	metas := make([]*rpc.Peer, 0, len(ch.Metas))
	for _, i := range ch.Metas {
		metas = append(metas, c.metas[i])
	}
	if len(ch.Inos) > 0 {
		metas = c.metas // where each flush committed is the route's business
	}
	return c.syncMetas(ctx, metas)
}

// syncData makes ino's written data durable: flushed and synced if the
// file is open here; else its last close flushed it, and, unless that
// close synced it too, it is synced on every store.
func (c *Client) syncData(ctx context.Context, ino core.Ino) error {
	c.mu.Lock()
	n := c.mu.open[ino]
	c.mu.Unlock()
	switch {
	case n != nil:
		err := n.flush(ctx, true)
		if err == nil {
			c.pgForget(ino)
		}
		return err
	case c.cfg.SyncOnClose:
		c.pgForget(ino)
		return nil
	}
	// The handle is gone, and its capability with it: ask for one by the
	// file's name (a file's attributes live in its entry).
	c.pgs.mu.Lock()
	ref, ok := c.pgs.mu.names[ino]
	c.pgs.mu.Unlock()
	if !ok {
		return errs.New(errs.IO, "patchgroup sync", "file %d was written under a patchgroup, closed, and its name forgotten: it cannot be made durable", ino)
	}
	req := &pb.GetCapabilityRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Rights: uint32(auth.Write)}
	var r pb.GetCapabilityReply
	if err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodGetCapability, req, &r, true); err != nil {
		if errs.Is(err, errs.NotExist) {
			return nil // removed since: nothing of it to keep
		}
		return err
	}
	err := c.onStores(allStores(len(c.stores)), func(s int) error {
		return call(ctx, c.stores[s], pb.MethodSyncChunks, &pb.SyncChunksRequest{Ino: uint64(ino), Capability: r.Capability}, &pb.SyncChunksReply{})
	})
	if err == nil {
		c.pgForget(ino)
	}
	return err
}

// pgForget drops the name kept for ino: its data is durable.
func (c *Client) pgForget(ino core.Ino) {
	c.pgs.mu.Lock()
	delete(c.pgs.mu.names, ino)
	c.pgs.mu.Unlock()
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
