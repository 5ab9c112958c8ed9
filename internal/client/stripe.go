package client

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Erasure-coded data (Config.Erasure; the layout is internal/erasure's).
//
// Writes. An upload of bytes [a, b) of chunk i (a data unit) takes stripe
// i/k's lock in this client, reads bytes [a, b) of the stripe's k-1 other
// data units, computes bytes [a, b) of the m parity units from them and
// the new bytes, and writes the data range and the m parity ranges in
// parallel: k-1 range reads and 1+m range writes (reconstruct-write, not
// read-modify-write of the old data and parity: it never depends on the
// old parity being right, so a stale parity is made whole again by the
// next write of its range). The data unit's store keeps the bytes the
// write replaced until the stripe's writes all succeeded, to roll a failed
// write back (stripeundo.go). An upload
// succeeds only when all 1+m writes did; otherwise the file's sticky error
// is EIO, as with replicas (docs/design.md "Guarantees"), and the units
// that took the write get their old bytes back. A data unit whose store
// is down does not stop a write to another unit of its stripe: the range
// it is read for is rebuilt from the others. Small writes into stripes
// written often go through the parity cache instead (stripecache.go).
//
// Clients. Each writer of a stripe holds the stripe's lock at the store of
// its first parity unit as well as this client's (stripelock.go), so
// that two clients never code parity from each other's old bytes.
//
// Reads. A data unit is read from its store. When the store fails, is
// incomplete (a restarted mem store), answers short (errs.Lost) or does not
// answer within ReplicaTimeout, the range is rebuilt from the other units
// of the stripe: all k+m-1 are asked at once and the first k answers
// decide. found = false from a store that answered is a hole (zeros): every
// write writes parity, so a parity unit a store lacks is one whose stripe
// was never written. Fewer than k answers: EIO, never a guess. Each unit's
// bytes are checked against their CRCs by its store as they are read, so a
// rebuilt range is made from checked bytes only. A parity unit whose stale
// mark is set (a parity cache's frame in flight, stripecache.go) counts as
// unreadable; a rebuild left short by marks waits a little for them.
//
// Shrinks. A truncate to a smaller size holds the stripe that will hold
// the new end locked, with its parity marked stale, from before the meta
// server cuts the data until the client has cut that stripe itself and
// rewritten its parity; it then drops the parity units of the stripes
// past it (stripeguard.go, stripeshrink.go).

// stripes is the client's erasure state: the scheme, its codec, and the
// lock of each stripe being written, so that two uploads of one stripe
// never compute parity from each other's old bytes.
type stripes struct {
	scheme erasure.Scheme
	codec  *erasure.Codec
	cache  *parityCache // nil: no parity cache (stripecache.go)
	erasureCounters
	owner   uint64        // this client's name at the stripe locks' stores (stripelock.go)
	lockSeq atomic.Uint64 // names each grant of a stripe lock
	mu      struct {
		sync.Mutex
		held  map[stripeKey]chan struct{} // closed by the holder's unlock
		holds map[stripeKey]stripeHold    // stripe locks held at their stores
	}
}

type stripeKey struct {
	ino    core.Ino
	stripe uint64
}

// checkErasure validates Config.Erasure against the rest of the config.
func (c *Config) checkErasure() error {
	if !c.Erasure.Enabled() {
		return nil
	}
	if err := c.Erasure.Validate(len(c.StoreAddrs)); err != nil {
		return errs.Wrap(errs.Invalid, "client config", "", err)
	}
	if c.Replication != 1 {
		return errs.New(errs.Invalid, "client config", "replication %d with %s: erasure coding keeps one copy of each unit", c.Replication, c.Erasure)
	}
	if c.ParityFrames == 0 {
		c.ParityFrames = defaultParityFrames
	}
	if c.ParityFrameAge <= 0 {
		c.ParityFrameAge = defaultParityFrameAge
	}
	if c.WriteBuffer == 0 && c.ChunkSize > 0 {
		c.WriteBuffer = 2 * int64(c.Erasure.K) * c.ChunkSize // two stripes (stripefull.go)
	}
	return nil
}

// newStripes returns the erasure state of cfg, nil under replication.
func newStripes(cfg Config) (*stripes, error) {
	if !cfg.Erasure.Enabled() {
		return nil, nil
	}
	codec, err := erasure.NewCodec(cfg.Erasure)
	if err != nil {
		return nil, err
	}
	sp := &stripes{scheme: cfg.Erasure, codec: codec, owner: newStripeOwner()}
	sp.mu.held = map[stripeKey]chan struct{}{}
	sp.mu.holds = map[stripeKey]stripeHold{}
	if cfg.ParityFrames > 0 {
		sp.cache = newParityCache(cfg)
	}
	return sp, nil
}

// lock takes the stripe's lock in this client, waiting for its holder at
// most as long as ctx lasts (an upload holds it for one bounded
// reconstruct-write). Writers take the stripe's lock across clients too
// (lockStripe).
func (sp *stripes) lock(ctx context.Context, ino core.Ino, stripe uint64) (unlock func(), err error) {
	k := stripeKey{ino, stripe}
	for {
		sp.mu.Lock()
		ch := sp.mu.held[k]
		if ch == nil {
			ch = make(chan struct{})
			sp.mu.held[k] = ch
			sp.mu.Unlock()
			return func() {
				sp.mu.Lock()
				delete(sp.mu.held, k)
				sp.mu.Unlock()
				close(ch)
			}, nil
		}
		sp.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctxError("lock stripe", ctx)
		}
	}
}

// layoutReplication is the replication the meta server is told a file was
// written with: it cuts the chunk holding a truncate's new end on the
// stores it names (erasure.PlacedStores), which under erasure coding is
// the scheme's code (a data unit's store is chosen by stripe, not by
// chunk).
func (c *Client) layoutReplication() uint32 {
	if c.ec != nil {
		return c.ec.scheme.Code()
	}
	return uint32(c.cfg.Replication)
}

// unitStore returns the store of the unit at chunk index of ino.
func (c *Client) unitStore(ino core.Ino, index uint64) int {
	return c.ec.scheme.StoreOf(ino, index, len(c.stores))
}

// readUnitOn reads n bytes at off of unit index of ino from store s, once:
// the bytes the unit has there (short: zeros past them), and whether the
// store holds the unit at all. A store that holds it but returns fewer
// bytes than it recorded is errs.Lost.
func (c *Client) readUnitOn(ctx context.Context, ino core.Ino, index uint64, s int, off, n int64) ([]byte, bool, error) {
	var r pb.ReadChunkReply
	var data []byte
	err := c.withCapability(ctx, ino, auth.Read, func(tok []byte) (err error) {
		req := &pb.ReadChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off, Length: n, Capability: tok}
		data, err = c.stores[s].CallData(ctx, pb.MethodReadChunk, req, nil, &r)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	k, found, err := checkReplica(s, int64(len(data)), r.Found, r.ChunkSize, off, n)
	if err != nil || !found {
		return nil, false, err
	}
	return data[:k], true, nil
}

// writeUnitOn writes data at off of unit index of ino on store s.
func (c *Client) writeUnitOn(ctx context.Context, ino core.Ino, index uint64, s int, off int64, data []byte, sync bool) error {
	return c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
		req := &pb.WriteChunkRequest{
			Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off,
			Sync: sync, WriteBehind: !sync && c.cfg.SyncOnClose, Capability: tok,
		}
		_, err := c.stores[s].CallData(ctx, pb.MethodWriteChunk, req, data, &pb.WriteChunkReply{})
		return err
	})
}
