package repair

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// maxCopy is the largest chunk one replace carries (a frame's limit).
const maxCopy = 64 << 20

// maxLostListed bounds Report.Lost.
const maxLostListed = 100

// target is a placed copy to (re)write: the version the store holds now (0:
// none), which the replace expects.
type target struct {
	store  int
	expect uint64
}

// repairChunk brings chunk id to its placed replicas.
func (p *pass) repairChunk(ctx context.Context, id *weftpb.ChunkID, holders []*weftpb.ChunkInfo) {
	var newest *weftpb.ChunkInfo
	for _, h := range holders {
		if h != nil && (newest == nil || h.GetVersion() > newest.GetVersion()) {
			newest = h
		}
	}
	placed := core.ChunkReplicas(core.Ino(id.GetIno()), id.GetIndex(), len(p.cfg.Stores), p.cfg.Replication)
	var targets []target
	bad := map[int]bool{}
	for _, s := range placed {
		if p.cfg.Only >= 0 && s != p.cfg.Only || p.listers[s].err != nil {
			continue
		}
		h := holders[s]
		switch {
		case h == nil:
			p.rep.Missing++
			targets = append(targets, target{store: s})
		case h.GetVersion() < newest.GetVersion():
			p.rep.Stale++
			targets = append(targets, target{store: s, expect: h.GetVersion()})
		case p.cfg.Verify && !p.lostChunks(s) && !p.verify(ctx, s, h):
			p.rep.Bad++
			bad[s] = true
			targets = append(targets, target{store: s, expect: h.GetVersion()})
		}
	}
	if len(targets) == 0 {
		return
	}
	p.rep.UnderReplicated++
	if p.cfg.DryRun {
		return
	}
	data, version, ok, gone := p.readNewest(ctx, id, sourceOrder(placed, holders), holders, newest.GetVersion(), bad)
	if gone {
		// Deleted since it was listed (its file was removed or
		// truncated): nothing to copy, and copying would bring it back.
		p.rep.Raced += int64(len(targets))
		return
	}
	if !ok {
		p.rep.Unrecoverable += int64(len(targets))
		if len(p.rep.Lost) < maxLostListed {
			p.rep.Lost = append(p.rep.Lost, id)
		}
		p.log.Error("repair: no readable copy of a chunk is left: its data is lost", "chunk", id, "version", newest.GetVersion())
		return
	}
	for _, t := range targets {
		p.copyTo(ctx, id, t, data, version)
	}
	p.throttle(ctx)
}

// lostChunks reports whether store s said it lost chunks when the pass
// began.
func (p *pass) lostChunks(s int) bool {
	_, ok := p.incomplete[s]
	return ok
}

// verify reads store s's whole copy; false if it fails its checksum, is cut
// short (errs.Lost) or has gone.
func (p *pass) verify(ctx context.Context, s int, h *weftpb.ChunkInfo) bool {
	_, _, err := p.read(ctx, s, h)
	if err != nil {
		p.log.Warn("repair: a copy fails verification", "store", s, "chunk", h.GetChunk(), "err", err)
	}
	return err == nil
}

// read reads store s's copy of the chunk h describes, checking that it
// still has h's version.
func (p *pass) read(ctx context.Context, s int, h *weftpb.ChunkInfo) ([]byte, uint64, error) {
	if h.GetSize() > maxCopy {
		return nil, 0, errs.New(errs.TooBig, "repair", "chunk %v is %d bytes, more than one copy carries", h.GetChunk(), h.GetSize())
	}
	req := &weftpb.ReadChunkRequest{Chunk: h.GetChunk(), Length: h.GetSize(), Capability: p.capability(h.GetChunk().GetIno())}
	var reply weftpb.ReadChunkReply
	var data []byte
	err := p.call(ctx, func(ctx context.Context) error {
		var err error
		data, err = p.cfg.Stores[s].CallData(ctx, weftpb.MethodReadChunk, req, nil, &reply)
		return err
	})
	switch {
	case err != nil:
		return nil, 0, err
	case !reply.GetFound():
		return nil, 0, errs.New(errs.NotExist, "repair", "store %d no longer holds chunk %v", s, h.GetChunk())
	case int64(len(data)) != h.GetSize() || reply.GetChunkSize() != h.GetSize():
		return nil, 0, errs.New(errs.Lost, "repair", "store %d returned %d of chunk %v's %d bytes", s, len(data), h.GetChunk(), h.GetSize())
	}
	return data, reply.GetVersion(), nil
}

// readNewest reads the chunk from a store that holds its newest version,
// placed copies first, skipping copies known bad. gone says that every
// source tried no longer holds the chunk: it was deleted since the listing.
func (p *pass) readNewest(ctx context.Context, id *weftpb.ChunkID, order []int, holders []*weftpb.ChunkInfo, version uint64, bad map[int]bool) (data []byte, v uint64, ok, gone bool) {
	tried, missing := 0, 0
	for _, s := range order {
		h := holders[s]
		if h.GetVersion() != version || bad[s] {
			continue
		}
		tried++
		data, v, err := p.read(ctx, s, h)
		if err == nil && v == version {
			return data, v, true, false
		}
		if errs.Is(err, errs.NotExist) {
			missing++
			continue
		}
		p.log.Warn("repair: reading a source copy failed", "store", s, "chunk", id, "version", version, "got", v, "err", err)
	}
	return nil, 0, false, tried > 0 && missing == tried
}

// sourceOrder lists the holders, placed replicas first.
func sourceOrder(placed []int, holders []*weftpb.ChunkInfo) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range placed {
		if holders[s] != nil {
			out = append(out, s)
			seen[s] = true
		}
	}
	for s, h := range holders {
		if h != nil && !seen[s] {
			out = append(out, s)
		}
	}
	return out
}

// copyTo writes data as the chunk's whole content at version on t.store, if
// that store still holds t.expect.
func (p *pass) copyTo(ctx context.Context, id *weftpb.ChunkID, t target, data []byte, version uint64) {
	req := &weftpb.WriteChunkRequest{Chunk: id, Replace: true, SetVersion: version, ExpectVersion: t.expect, Sync: true,
		Capability: p.capability(id.GetIno())}
	err := p.call(ctx, func(ctx context.Context) error {
		_, err := p.cfg.Stores[t.store].CallData(ctx, weftpb.MethodWriteChunk, req, data, &weftpb.WriteChunkReply{})
		return err
	})
	switch {
	case err == nil:
		p.rep.Copied++
		p.rep.CopiedBytes += int64(len(data))
	case errs.Is(err, errs.Stale):
		p.rep.Raced++
	default:
		p.rep.Failed++
		p.log.Warn("repair: writing a copy failed", "store", t.store, "chunk", id, "err", err)
	}
}

// throttle waits until the bytes copied so far fit RateBytes.
func (p *pass) throttle(ctx context.Context) {
	if p.cfg.RateBytes <= 0 {
		return
	}
	due := time.Duration(float64(p.rep.CopiedBytes) / float64(p.cfg.RateBytes) * float64(time.Second))
	wait := due - time.Since(p.start)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// capability returns the capability for ino's chunks, if the pass has a
// source of them.
func (p *pass) capability(ino uint64) []byte {
	if p.cfg.Capability == nil {
		return nil
	}
	return p.cfg.Capability(ino)
}
