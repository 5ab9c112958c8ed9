package repair

import (
	"bytes"
	"context"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Erasure-coded clusters (Config.Erasure). A stripe's units have one copy
// each, so there is no newest copy to spread: what a pass rebuilds is every
// unit placed on a store that lost its chunks (an incomplete store: a mem
// store restarted, a replaced disk), from any k of the stripe's other
// units, read whole. A unit such a store holds is rebuilt too: it may hold
// only the writes that reached it since it came back. A store that lost
// nothing never lacks a unit that was written (a write reaches every unit
// it changes or fails), so a unit absent there is a hole, not a loss.
//
// The bytes come from reads that the stores check against their CRCs; a
// source that fails its checksum (errs.Corrupt) or is short (errs.Lost)
// counts as unreadable. Trailing zeros of a rebuilt unit are not written
// (bytes past a unit's end read as zeros), and a unit that rebuilds to
// nothing but zeros is a hole.
//
// Races: the pass holds the stripe's write lock, as client writers do
// (erasurelock.go), and leaves a stripe a writer keeps locked to the next
// pass (Raced); each source's version is read again after the rebuild and
// the stripe is left to the next pass if one changed; the write is a
// conditional replace on the target's listed version.

// fileUnits is what the stores list of one file: unit index -> holders.
type fileUnits map[uint64][]*weftpb.ChunkInfo

// runErasure is Run's loop for an erasure-coded cluster: the listings
// arrive in (ino, index) order, so one file's units are gathered at a time.
func (p *pass) runErasure(ctx context.Context) {
	var ino uint64
	units := fileUnits{}
	flush := func() {
		if len(units) > 0 {
			p.repairFile(ctx, ino, units)
		}
		units = fileUnits{}
	}
	for ctx.Err() == nil {
		id, holders := p.next(ctx)
		if id == nil {
			break
		}
		p.rep.Chunks++
		if id.GetIno() != ino {
			flush()
			ino = id.GetIno()
		}
		units[id.GetIndex()] = holders
	}
	flush()
}

// repairFile rebuilds the units of ino's stripes placed on stores that lost
// chunks.
func (p *pass) repairFile(ctx context.Context, ino uint64, units fileUnits) {
	sc := p.cfg.Erasure
	var stripes []uint64
	for idx := range units {
		st, _ := sc.Unit(idx) // a stale mark's is its parity unit's
		if !slices.Contains(stripes, st) {
			stripes = append(stripes, st)
		}
	}
	slices.Sort(stripes)
	for _, st := range stripes {
		if ctx.Err() != nil {
			return
		}
		stores := sc.Stores(core.Ino(ino), st, len(p.cfg.Stores))
		var targets []int // positions to rebuild
		for pos, s := range stores {
			if p.cfg.Only >= 0 && s != p.cfg.Only || p.listers[s].err != nil {
				continue
			}
			if p.lostChunks(s) {
				targets = append(targets, pos)
			}
		}
		marks := p.marksOf(st, stores, units)
		if len(targets) > 0 {
			p.rep.UnderReplicated++
			p.rep.Missing += int64(len(targets))
		}
		if p.cfg.DryRun && len(targets) > 0 || len(targets) == 0 && len(marks.stale) == 0 && !p.cfg.Verify {
			continue
		}
		release, ok := func() {}, true
		if !p.cfg.DryRun { // a dry run writes nothing
			release, ok = p.lockStripe(ctx, ino, sc.ParityIndex(st, 0), stores[sc.K])
		}
		if !ok {
			p.rep.Raced += max(int64(len(targets)), 1)
			p.log.Warn("repair: a client is writing the stripe: left to the next pass", "ino", ino, "stripe", st)
			continue
		}
		switch {
		case len(targets) > 0:
			p.rebuildStripe(ctx, ino, st, stores, targets, units, marks)
			p.throttle(ctx)
		case len(marks.stale) > 0:
			p.fixMarked(ctx, ino, st, stores, units, marks)
		default:
			p.verifyStripe(ctx, ino, st, stores, units)
		}
		release()
	}
}

// unitRead is a source unit as read for a rebuild.
type unitRead struct {
	data    []byte
	version uint64 // 0: the store does not hold it (a hole)
}

// rebuildStripe rebuilds the units at positions targets of stripe st.
// Marked parity units are no sources: their parity may not match. A
// stripe left with too few sources by young marks waits for the next pass
// (Raced): the client that set them is likely alive and flushing.
func (p *pass) rebuildStripe(ctx context.Context, ino, st uint64, stores, targets []int, units fileUnits, marks stripeMarks) {
	stale := marks.stale
	sc := p.cfg.Erasure
	id := func(pos int) *weftpb.ChunkID { return &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)} }
	// The longest unit decides the range: parity is as long as the
	// longest data unit it covers.
	var n int64
	for pos, s := range stores {
		if slices.Contains(targets, pos) {
			continue
		}
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[s] != nil {
			n = max(n, h[s].GetSize())
		}
	}
	if n > maxCopy {
		p.rep.Failed += int64(len(targets))
		p.log.Warn("repair: a stripe unit is larger than one copy carries", "ino", ino, "stripe", st, "size", n)
		return
	}
	shards := make([][]byte, sc.Width())
	reads := map[int]unitRead{}
	for pos, s := range stores {
		if slices.Contains(targets, pos) || slices.Contains(stale, pos) || p.listers[s].err != nil || len(reads) == sc.K {
			continue
		}
		r, err := p.readUnit(ctx, s, id(pos), n)
		if err != nil {
			p.log.Warn("repair: a source unit is unreadable", "store", s, "chunk", id(pos), "err", err)
			continue
		}
		reads[pos] = r
		shards[pos] = r.data
	}
	if len(reads) < sc.K && marks.young {
		p.rep.Raced += int64(len(targets))
		p.log.Warn("repair: a stripe's parity is marked stale by a client's parity cache: left to the next pass", "ino", ino, "stripe", st)
		return
	}
	if len(reads) < sc.K {
		p.rep.Unrecoverable += int64(len(targets))
		if len(p.rep.Lost) < maxLostListed {
			p.rep.Lost = append(p.rep.Lost, id(targets[0]))
		}
		p.log.Error("repair: fewer than k units of a stripe are readable: its data is lost", "ino", ino, "stripe", st, "readable", len(reads), "scheme", sc)
		return
	}
	codec, err := erasure.NewCodec(sc)
	if err == nil {
		err = codec.Reconstruct(shards, int(n))
	}
	if err != nil {
		p.rep.Failed += int64(len(targets))
		p.log.Warn("repair: rebuilding a stripe failed", "ino", ino, "stripe", st, "err", err)
		return
	}
	// The sources must not have changed while they were read.
	for pos, r := range reads {
		again, err := p.readUnit(ctx, stores[pos], id(pos), 0)
		if err != nil || again.version != r.version {
			p.rep.Raced += int64(len(targets))
			return
		}
	}
	// A unit rebuilt as zeros is a hole only if the whole stripe is: a
	// parity unit of written data can be all zeros, and so can written
	// data, and a reader counts a unit that some write reached and no store
	// holds as lost (core.Extents).
	holes := true
	for _, r := range reads {
		holes = holes && r.version == 0
	}
	for _, pos := range targets {
		s := stores[pos]
		var expect uint64
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[s] != nil {
			expect = h[s].GetVersion()
		}
		data := unitBytes(shards[pos])
		if len(bytes.TrimRight(data, "\x00")) == 0 && expect == 0 && holes {
			p.rep.Missing-- // a hole: nothing was lost
			continue
		}
		p.copyTo(ctx, id(pos), target{store: s, expect: expect}, data, expect+1)
	}
}

// readUnit reads the first n bytes of unit id from store s (n = 0: only its
// version). A unit the store lacks is a hole: no bytes, version 0.
func (p *pass) readUnit(ctx context.Context, s int, id *weftpb.ChunkID, n int64) (unitRead, error) {
	req := &weftpb.ReadChunkRequest{Chunk: id, Length: n, Capability: p.capability(id.GetIno())}
	var reply weftpb.ReadChunkReply
	var data []byte
	err := p.call(ctx, func(ctx context.Context) error {
		var err error
		data, err = p.cfg.Stores[s].CallData(ctx, weftpb.MethodReadChunk, req, nil, &reply)
		return err
	})
	switch {
	case err != nil:
		return unitRead{}, err
	case !reply.GetFound():
		return unitRead{data: []byte{}}, nil
	case int64(len(data)) < min(n, reply.GetChunkSize()):
		return unitRead{}, errs.New(errs.Lost, "repair", "store %d returned %d of unit %v's %d bytes", s, len(data), id, min(n, reply.GetChunkSize()))
	}
	return unitRead{data: data, version: reply.GetVersion()}, nil
}

// unitBytes is what a rebuilt or rewritten unit b is written as: without
// its trailing zeros (a read past a unit's end is zeros), but never empty
// when b is not, because a written unit must exist: a reader counts one
// that no store holds as lost (core.Extents).
func unitBytes(b []byte) []byte {
	t := bytes.TrimRight(b, "\x00")
	if len(t) == 0 && len(b) > 0 {
		return b[:1]
	}
	return t
}
