package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// writeChunk writes data at off within chunk (ino, index) to every replica in
// parallel. It succeeds only if all replicas took the bytes: a replica that
// silently missed a write would serve stale data after a failover. The
// bytes go out as the frame's attachment, straight from data, which is the
// caller's again when writeChunk returns. When close will sync the chunk
// (SyncOnClose), the stores start writing it to their devices at once.
func (c *Client) writeChunk(ctx context.Context, ino core.Ino, index uint64, off int64, data []byte, sync bool) ([]int, error) {
	if c.ec != nil {
		return c.writeStripeUnit(ctx, ino, index, off, data, sync)
	}
	reps := replicas(ino, index, len(c.stores), c.cfg.Replication)
	err := c.onStores(reps, func(s int) error {
		return c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
			req := &pb.WriteChunkRequest{
				Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off,
				Sync: sync, WriteBehind: !sync && c.cfg.SyncOnClose, Capability: tok,
			}
			_, err := c.stores[s].CallData(ctx, pb.MethodWriteChunk, req, data, &pb.WriteChunkReply{})
			return err
		})
	})
	return reps, err
}

// retryUnavailable runs the idempotent fn again while its server is
// unreachable, for up to Config.RetryFor (the policy of callIdempotent, for
// calls that are not a plain Call).
func (c *Client) retryUnavailable(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(c.cfg.RetryFor)
	backoff := 20 * time.Millisecond
	for {
		err := fn()
		if !errs.Is(err, errs.Unavailable) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errs.Wrap(errs.Canceled, "retry", "", ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// failoverable reports whether another replica may succeed where one failed.
func failoverable(err error) bool {
	switch errs.KindOf(err) {
	case errs.Unavailable, errs.Corrupt, errs.IO, errs.Timeout, errs.Lost:
		return true
	}
	return false
}

// onStores runs fn for each store in parallel and returns the first error.
func (c *Client) onStores(stores []int, fn func(s int) error) error {
	if len(stores) == 1 {
		return fn(stores[0])
	}
	errc := make(chan error, len(stores))
	for _, s := range stores {
		go func() { errc <- fn(s) }()
	}
	var first error
	for range stores {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func allStores(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// shrinkChunks drops file bytes at and past size from the stores: whole
// chunks past it, and the tail of the chunk it falls in. Only for a file
// with no name left (orphan.go): a named file's truncate has the meta
// server drop them (meta/reclaim.go). tok is the file's write capability;
// the caller holds the file's mutex, so a refused one is not renewed here.
// oldSize is the file's size before.
func (c *Client) shrinkChunks(ctx context.Context, ino core.Ino, size, oldSize uint64, tok []byte) error {
	if c.ec != nil {
		return c.shrinkStripes(ctx, ino, size, oldSize, tok)
	}
	cs := uint64(c.cfg.ChunkSize)
	from := core.ChunkCount(size, c.cfg.ChunkSize)
	err := c.onStores(allStores(len(c.stores)), func(s int) error {
		return call(ctx, c.stores[s], pb.MethodDeleteChunks, &pb.DeleteChunksRequest{Ino: uint64(ino), From: from, Capability: tok}, &pb.DeleteChunksReply{})
	})
	if err != nil || size%cs == 0 {
		return err
	}
	idx := size / cs
	req := &pb.TruncateChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: idx}, Size: int64(size % cs), Capability: tok}
	return c.onStores(replicas(ino, idx, len(c.stores), c.cfg.Replication), func(s int) error {
		return call(ctx, c.stores[s], pb.MethodTruncateChunk, req, &pb.TruncateChunkReply{})
	})
}

// syncStores makes every chunk of ino durable on the given stores.
func (c *Client) syncStores(ctx context.Context, ino core.Ino, stores map[int]bool) error {
	list := make([]int, 0, len(stores))
	for s := range stores {
		list = append(list, s)
	}
	if len(list) == 0 {
		return nil
	}
	return c.onStores(list, func(s int) error {
		return c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
			return call(ctx, c.stores[s], pb.MethodSyncChunks, &pb.SyncChunksRequest{Ino: uint64(ino), Capability: tok}, &pb.SyncChunksReply{})
		})
	})
}
