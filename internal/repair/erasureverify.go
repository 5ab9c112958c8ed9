package repair

import (
	"bytes"
	"context"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/proto/weftpb"
)

// verifyStripe (Verify) reads every unit of a stripe whose stores lost
// nothing. A unit that fails its checksum or is cut short is rebuilt from
// the others; a stripe whose parity does not match its data (a write that
// failed and could not be rolled back, a crash between a write's data and
// its parity) gets its parity recomputed from the data, which is what
// readers read directly.
func (p *pass) verifyStripe(ctx context.Context, ino, st uint64, stores []int, units fileUnits) {
	sc := p.cfg.Erasure
	var n int64
	for pos, s := range stores {
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[s] != nil {
			n = max(n, h[s].GetSize())
		}
	}
	if n == 0 || n > maxCopy {
		return
	}
	shards := make([][]byte, sc.Width())
	var bad []int
	for pos, s := range stores {
		if p.listers[s].err != nil {
			return // unknown: left to a pass that can list it
		}
		r, err := p.readUnit(ctx, s, &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)}, n)
		if err != nil {
			p.log.Warn("repair: a stripe unit fails verification", "store", s, "ino", ino, "stripe", st, "position", pos, "err", err)
			bad = append(bad, pos)
			continue
		}
		shards[pos] = r.data
	}
	if len(bad) > 0 {
		p.rep.UnderReplicated++
		p.rep.Bad += int64(len(bad))
		p.rebuildStripe(ctx, ino, st, stores, bad, units, p.marksOf(st, stores, units))
		return
	}
	codec, err := erasure.NewCodec(sc)
	if err != nil {
		return
	}
	ok, err := codec.Verify(shards, int(n))
	if err != nil || ok {
		return
	}
	parity, err := codec.ParityRange(shards[:sc.K], int(n))
	if err != nil {
		return
	}
	p.rep.UnderReplicated++
	for j, pb := range parity {
		pos := sc.K + j
		got := bytes.TrimRight(shards[pos], "\x00")
		want := bytes.TrimRight(pb, "\x00")
		if bytes.Equal(got, want) {
			continue
		}
		p.rep.Stale++
		s := stores[pos]
		var expect uint64
		if h := units[sc.UnitIndex(st, pos)]; h != nil && h[s] != nil {
			expect = h[s].GetVersion()
		}
		p.log.Warn("repair: stale parity rewritten from the data", "ino", ino, "stripe", st, "parity", j, "store", s)
		p.copyTo(ctx, &weftpb.ChunkID{Ino: ino, Index: sc.UnitIndex(st, pos)}, target{store: s, expect: expect}, unitBytes(pb), expect+1)
	}
}
