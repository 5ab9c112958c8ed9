package client

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Undoing a data unit's write (stripewrite.go). The write of a partial
// stripe's data unit must be undoable until its parity writes succeeded.
// The store keeps the bytes the write replaced (keep_old, store.proto) and
// the client either releases them (one-way) once the stripe's writes all
// succeeded or, when one failed, has them put back (UndoWrite), which also
// returns them for the parity's rollback. Before, they travelled back with
// every write (return_old): a third of a partial-stripe write's bytes and
// about a tenth of its CPU (docs/benchmarks.md, issue 16, third pass). A
// store that has no room to keep them, or predates keep_old, still sends
// them back (the request asks for both; keep_old wins where known).

// undoReleaseTimeout bounds handing a ReleaseUndo to its connection.
const undoReleaseTimeout = 10 * time.Second

// unitUndo is how a data unit's write can be undone.
type unitUndo struct {
	old   []byte // the replaced bytes, when the store sent them back
	known bool   // the replaced bytes are old, or kept by the store
	kept  uint64 // non-zero: the store keeps them under this id
	tok   []byte // the capability the write went with (for the release)
}

// errSwapRefused is a data unit's write refused before it wrote anything:
// its store lost chunks and cannot say what the range held.
var errSwapRefused = errs.New(errs.Lost, "write unit", "the store cannot return the bytes it replaces")

// swapUnitOn writes data at off of unit index on store s, undoably (see
// above). A store that lost chunks (incomplete) refuses that: then the
// bytes are written without (known false), and a failure of that write is
// errSwapRefused's.
func (c *Client) swapUnitOn(ctx context.Context, ino core.Ino, index uint64, s int, off int64, data []byte, durable bool) (unitUndo, error) {
	id := rand.Uint64() | 1 // never 0 (no keep_old); unique per chunk in practice
	var u unitUndo
	err := c.withCapability(ctx, ino, auth.Write, func(tok []byte) (err error) {
		req := &pb.WriteChunkRequest{
			Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off,
			Sync: durable, WriteBehind: !durable && c.cfg.SyncOnClose, Capability: tok,
			KeepOld: id, ReturnOld: true,
		}
		var r pb.WriteChunkReply
		u = unitUndo{tok: tok}
		u.old, err = c.stores[s].CallData(ctx, pb.MethodWriteChunk, req, data, &r)
		if err == nil && r.GetOldKept() {
			u.kept = id
		}
		return err
	})
	if errs.Is(err, errs.Lost) {
		if err := c.writeUnitOn(ctx, ino, index, s, off, data, durable); err != nil {
			return unitUndo{}, errSwapRefused
		}
		return unitUndo{}, nil
	}
	u.known = err == nil
	return u, err
}

// releaseUndo tells data unit pos's store that it may drop what the
// write kept: the stripe's writes all succeeded. One-way and in the
// background: the writer does not wait, and a release that gets lost
// only leaves the bytes until the store's own bound (or the chunk's next
// undoable write).
func (c *Client) releaseUndo(ctx context.Context, ino core.Ino, stripe uint64, pos int, u unitUndo) {
	if u.kept == 0 {
		return
	}
	idx, s := c.writtenUnit(ino, stripe, pos, 0)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoReleaseTimeout)
	go func() {
		defer cancel()
		_ = c.stores[s].Send(ctx, pb.MethodReleaseUndo, &pb.ReleaseUndo{
			Chunk: &pb.ChunkID{Ino: uint64(ino), Index: idx}, UndoId: u.kept, Capability: u.tok,
		})
	}()
}

// undoUnit puts back the bytes a data unit's write of n bytes at off
// replaced, and returns the range as it is then (zeros past the unit's old
// end).
func (c *Client) undoUnit(ctx context.Context, ino core.Ino, index uint64, s int, off, n int64, u unitUndo) ([]byte, error) {
	cur := make([]byte, n)
	c.ec.writes.Add(1)
	if u.kept == 0 {
		// The store sent them back: write them again.
		copy(cur, u.old)
		return cur, c.writeUnitOn(ctx, ino, index, s, off, cur, false)
	}
	err := c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
		req := &pb.UndoWriteRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, UndoId: u.kept, Capability: tok}
		old, err := c.stores[s].CallData(ctx, pb.MethodUndoWrite, req, nil, &pb.UndoWriteReply{})
		copy(cur, old)
		rpc.PutBuffer(old)
		return err
	})
	return cur, err
}
