package repair

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/proto/weftpb"
)

// Stale marks (erasure.MarkIndex): a client's parity cache marks a
// stripe's parity units before it writes data that their parity does not
// yet cover, and clears the marks once it wrote the parity. A marked
// parity unit is no source for a rebuild. A mark older than MarkGrace is
// that of a client that died (or lost the stores) before its flush: the
// pass rewrites the stripe's parity from its data and then clears the
// marks, each write conditional on the version it listed.

// DefaultMarkGrace is how old a stale mark must be before a pass treats
// its client as gone (Config.MarkGrace): far beyond the clients' frame
// age bound (1 s) and a store call's bound (20 s).
const DefaultMarkGrace = time.Minute

// stripeMarks is what the listings say of a stripe's stale marks.
type stripeMarks struct {
	stale []int // positions of the marked parity units
	young bool  // some mark is younger than Config.MarkGrace
}

// marksOf reads stripe st's stale marks from the listings.
func (p *pass) marksOf(st uint64, stores []int, units fileUnits) stripeMarks {
	sc := p.cfg.Erasure
	var m stripeMarks
	for j := range sc.M {
		pos := sc.K + j
		h := units[sc.MarkIndex(st, j)]
		if h == nil || h[stores[pos]] == nil || h[stores[pos]].GetSize() == 0 {
			continue
		}
		m.stale = append(m.stale, pos)
		if time.Since(time.Unix(0, h[stores[pos]].GetMtimeUnixNano())) < p.cfg.MarkGrace {
			m.young = true
		}
	}
	return m
}

// fixMarked rewrites the parity of a marked stripe whose stores lost
// nothing from its k data units, then clears its marks.
func (p *pass) fixMarked(ctx context.Context, ino, st uint64, stores []int, units fileUnits, m stripeMarks) {
	sc := p.cfg.Erasure
	p.rep.Marked++
	if m.young || p.cfg.DryRun {
		return // a live client's frame, most likely: its flush clears it
	}
	var n int64
	for pos := range sc.K {
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[stores[pos]] != nil {
			n = max(n, h[stores[pos]].GetSize())
		}
	}
	if n > maxCopy {
		p.rep.Failed++
		return
	}
	data := make([][]byte, sc.K)
	versions := make([]uint64, sc.K)
	for pos := range sc.K {
		r, err := p.readUnit(ctx, stores[pos], &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)}, n)
		if err != nil {
			p.rep.Failed++
			p.log.Warn("repair: a data unit of a stripe with stale parity is unreadable", "ino", ino, "stripe", st, "position", pos, "err", err)
			return
		}
		data[pos], versions[pos] = r.data, r.version
	}
	codec, err := erasure.NewCodec(sc)
	if err != nil {
		return
	}
	parity, err := codec.ParityRange(data, int(n))
	if err != nil {
		return
	}
	for pos := range sc.K { // the data must not have changed meanwhile
		again, err := p.readUnit(ctx, stores[pos], &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)}, 0)
		if err != nil || again.version != versions[pos] {
			p.rep.Raced++
			return
		}
	}
	p.rep.UnderReplicated++
	before := p.rep.Copied
	for j, pb := range parity {
		pos := sc.K + j
		s := stores[pos]
		var expect uint64
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[s] != nil {
			expect = h[s].GetVersion()
		}
		p.rep.Stale++
		p.log.Warn("repair: parity marked stale rewritten from the data", "ino", ino, "stripe", st, "parity", j, "store", s)
		p.copyTo(ctx, &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)}, target{store: s, expect: expect}, unitBytes(pb), expect+1)
	}
	if p.rep.Copied-before != int64(sc.M) {
		return // the marks stay: the next pass tries again
	}
	for _, pos := range m.stale {
		s, idx := stores[pos], sc.MarkIndex(st, pos-sc.K)
		expect := units[idx][s].GetVersion()
		req := &weftpb.WriteChunkRequest{Chunk: &weftpb.ChunkID{Ino: ino, Index: idx}, Replace: true, SetVersion: expect + 1, ExpectVersion: expect,
			Capability: p.capability(ino)}
		err := p.call(ctx, func(ctx context.Context) error {
			_, err := p.cfg.Stores[s].CallData(ctx, weftpb.MethodWriteChunk, req, nil, &weftpb.WriteChunkReply{})
			return err
		})
		if err != nil {
			p.log.Warn("repair: clearing a stale mark failed; the next pass tries again", "store", s, "ino", ino, "stripe", st, "err", err)
		}
	}
}
