package client

import (
	"context"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// shrinkParity brings the parity of ino in line with a shrink from oldSize
// to size: the parity of the stripe holding the new end is rewritten for
// the data cut at size (g's, when guardShrink guarded it), and the parity
// units of the stripes past it, up to the old end, are removed (a
// truncate to 0, which needs only the write right the file's capability
// carries), so that a file growing into them again never meets parity of
// its old bytes. A shrink to 0 leaves it all to the meta server's
// reclaim, which drops every unit of the file.
//
// A shrink whose parity fix fails (a store down) has still happened: the
// error says that the stripe's parity may be stale, which `weft repair`
// finds and rewrites (internal/repair, erasure pass).
func (c *Client) shrinkParity(ctx context.Context, ino core.Ino, size, oldSize uint64, g *shrinkGuard) error {
	sc, cs := c.ec.scheme, c.cfg.ChunkSize
	if size >= oldSize {
		return nil
	}
	// Each store call is bounded as an upload is: the caller may hold the
	// file's mutex (a truncate through a handle).
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	sh := sc.ShrinkTo(size, cs)
	// Frames of the stripes the cut reached (made by uploads that raced
	// the truncate) know bytes that are gone: dropped, never written. The
	// guarded stripe has none: its lock was held all along.
	firstCut, _ := sc.Unit(sh.DropFrom)
	if sh.Rewrite && g == nil {
		firstCut = sh.Stripe
	}
	c.discardFrames(ctx, ino, firstCut)
	if size == 0 {
		return nil
	}
	if sh.Rewrite {
		if err := c.rewriteParity(ctx, ino, sh.Stripe, size, g); err != nil {
			return err
		}
	}
	first, _ := sc.Unit(sh.DropFrom)
	last, _ := sc.StripeOfSize(oldSize, cs)
	var past []uint64
	for st := first; st <= last; st++ {
		past = append(past, st)
	}
	if err := c.dropParity(ctx, ino, past); err != nil {
		return errs.Wrap(errs.IO, "truncate", "dropping parity past the new end", err)
	}
	return nil
}

// dropParity removes the parity units and stale marks of stripes of ino.
func (c *Client) dropParity(ctx context.Context, ino core.Ino, stripes []uint64) error {
	sc := c.ec.scheme
	var drop []uint64
	for _, st := range stripes {
		for j := range sc.M {
			drop = append(drop, sc.ParityIndex(st, j), sc.MarkIndex(st, j))
		}
	}
	return c.onStores(allStores(len(drop)), func(i int) error {
		return c.truncateUnit(ctx, ino, drop[i], 0)
	})
}

// flushBeforeCut writes the parity this client caches of ino (every
// file's with ino 0) before an O_TRUNC open or create has the meta server
// cut the file to nothing, parity units and stale marks included, as
// setAttr does before a truncate. A close does not flush a file's frames:
// one flushed after the cut would put back parity of the old bytes, and a
// write under one would code its parity from them (docs/design.md).
func (c *Client) flushBeforeCut(ino core.Ino) {
	if c.ec != nil {
		c.FlushParity(ino)
	}
}

// dropCutParity is shrinkParity for an O_TRUNC open, once the meta server
// answered it having cut the file to nothing: a frame of the file made
// since flushBeforeCut (a write through another handle racing the open)
// knows bytes that are gone. It is dropped unwritten, and the parity of
// its stripe is dropped once more, in case its flush ran after the cut.
func (c *Client) dropCutParity(ctx context.Context, ino core.Ino) {
	if c.ec == nil || c.ec.cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	if err := c.dropParity(ctx, ino, c.discardFrames(ctx, ino, 0)); err != nil {
		c.log.Error("parity cached for a file before an O_TRUNC open could not be dropped: the stripe's parity may be stale until weft repair --verify",
			"ino", ino, "err", err)
	}
}

// truncateUnit cuts the unit at chunk index of ino to size on its store
// (size 0 removes it).
func (c *Client) truncateUnit(ctx context.Context, ino core.Ino, index uint64, size int64) error {
	s := c.unitStore(ino, index)
	return c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
		req := &pb.TruncateChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Size: size, Capability: tok}
		return call(ctx, c.stores[s], pb.MethodTruncateChunk, req, &pb.TruncateChunkReply{})
	})
}

// rewriteParity makes the parity units of stripe, which holds the new
// end size of ino, those of its data cut at size: it cuts the stripe's
// data units on their stores itself (the meta server's cut may come
// later), then writes the parity whole and clears the stripe's marks.
// With g (the stripe guarded since before the meta server's truncate)
// the parity is g's; without, it is coded now from the data units, each
// read from its own store.
func (c *Client) rewriteParity(ctx context.Context, ino core.Ino, stripe, size uint64, g *shrinkGuard) error {
	sc, cs := c.ec.scheme, c.cfg.ChunkSize
	start := stripe * uint64(sc.K) * uint64(cs)
	n := int64(min(uint64(cs), size-start)) // the longest data unit left
	var parity [][]byte
	if g != nil {
		defer g.release()
		if err := c.cutShrunkStripe(ctx, g); err != nil {
			return err
		}
		parity = g.parity
	} else {
		// Not guarded (the client did not know the truncate shrinks the
		// file): degraded reads racing it are not covered (stripeguard.go).
		unlock, err := c.lockStripe(ctx, ino, stripe, forWrite)
		if err != nil {
			return err
		}
		defer unlock()
		if parity, err = c.codeShrunkParity(ctx, ino, stripe, size, n); err != nil {
			return err
		}
	}
	stores := sc.Stores(ino, stripe, len(c.stores))
	err := c.onStores(allStores(sc.M), func(j int) error {
		idx, s := sc.ParityIndex(stripe, j), stores[sc.K+j]
		c.ec.writes.Add(1)
		if err := c.writeUnitOn(ctx, ino, idx, s, 0, parity[j], false); err != nil {
			return err
		}
		// Parity bytes past n belonged to data that is gone.
		if err := c.truncateUnit(ctx, ino, idx, n); err != nil {
			return err
		}
		// The parity is whole again: the stale mark (the guard's, or a
		// frame's the shrink discarded) goes.
		return c.truncateUnit(ctx, ino, sc.MarkIndex(stripe, j), 0)
	})
	if err != nil {
		return errs.Wrap(errs.IO, "truncate", "rewriting the parity of the stripe holding the new end", err)
	}
	return nil
}

// codeShrunkParity codes the n bytes of stripe's parity for its data cut
// at size, the data units read from their own stores. The caller holds
// the stripe's lock.
func (c *Client) codeShrunkParity(ctx context.Context, ino core.Ino, stripe, size uint64, n int64) ([][]byte, error) {
	sc, cs := c.ec.scheme, c.cfg.ChunkSize
	start := stripe * uint64(sc.K) * uint64(cs)
	shards := make([][]byte, sc.K)
	defer func() {
		for _, d := range shards {
			rpc.PutBuffer(d)
		}
	}()
	err := c.onStores(allStores(sc.K), func(q int) error {
		ustart := start + uint64(q)*uint64(cs)
		if ustart >= size {
			return nil // dropped: zeros
		}
		// From the unit's own store only, never rebuilt: the meta server
		// has cut the data and the parity is still that of the old bytes,
		// so a rebuild now (a store down, or a read hedged) would give
		// bytes of neither, and the parity coded from them would be wrong
		// for good.
		idx := sc.DataIndex(stripe, q)
		c.ec.reads.Add(1)
		d, found, err := c.readUnitOn(ctx, ino, idx, c.unitStore(ino, idx), 0, min(n, int64(size-ustart)))
		if err == nil && !found {
			err = c.lostIfWritten(ino, idx)
		}
		shards[q] = d
		return err
	})
	if err != nil {
		return nil, errs.Wrap(errs.IO, "truncate", "reading the stripe holding the new end", err)
	}
	return c.ec.codec.ParityRange(shards, int(n))
}

// shrinkStripes is shrinkChunks under erasure coding (a file with no name
// left): data units from the new end on go, the one holding it is cut on
// its store, and the parity follows (shrinkParity).
func (c *Client) shrinkStripes(ctx context.Context, ino core.Ino, size, oldSize uint64, tok []byte) error {
	c.FlushParity(ino) // before the cut: frames know the bytes it removes
	// The stripe holding the new end is guarded across the cut, as for a
	// named file's truncate across the meta server's.
	g, err := c.guardShrink(ctx, ino, size, oldSize)
	if err != nil {
		return err
	}
	cs := uint64(c.cfg.ChunkSize)
	from := core.ChunkCount(size, c.cfg.ChunkSize)
	err = c.onStores(allStores(len(c.stores)), func(s int) error {
		return call(ctx, c.stores[s], pb.MethodDeleteChunks, &pb.DeleteChunksRequest{Ino: uint64(ino), From: from, Capability: tok}, &pb.DeleteChunksReply{})
	})
	if err == nil && size%cs != 0 {
		idx := size / cs
		req := &pb.TruncateChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: idx}, Size: int64(size % cs), Capability: tok}
		err = call(ctx, c.stores[c.unitStore(ino, idx)], pb.MethodTruncateChunk, req, &pb.TruncateChunkReply{})
	}
	if err != nil {
		if g != nil {
			g.release() // cut in part: the marks stay for repair
		}
		return err
	}
	if c.afterTruncateReply != nil {
		c.afterTruncateReply(ino)
	}
	return c.shrinkParity(ctx, ino, size, oldSize, g)
}
