package fsck

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Garbage collection of chunks (weft gc). The meta servers reclaim what
// unlinks and truncates free (internal/meta, reclaim.go); gc finds what
// nothing will: chunks of inodes that no meta server knows (a leak from
// before reclaim records, a client that wrote chunks and died before its
// commit) and chunks past the end of their file.
//
// Order and safety: gc first lists every store's chunks, then reads the
// owners of the inodes it saw from the meta servers, twice; a chunk is an
// orphan only when both reads agree. An inode with a reclaim record is left
// to its meta server (a held one belongs to a file still open). A chunk
// younger than the grace period is never touched: a client may have written
// it and not committed yet. The grace must exceed the longest time a client
// keeps written bytes uncommitted (a file open for writing without flush or
// close). Deletion is DeleteChunks(ino, from), which removes every chunk of
// ino at or past from on that store, so gc deletes only when every such
// chunk is old enough, as it lists them again right before the deletion
// (a chunk written in the moment between that listing and the deletion
// would go: the grace protects writes, this check only narrows that
// moment to one round trip).

// DefaultGCGrace is how old a chunk must be before gc may delete it.
const DefaultGCGrace = 10 * time.Minute

// GCOptions configure GC.
type GCOptions struct {
	// Grace: chunks changed more recently are left alone; 0 means
	// DefaultGCGrace.
	Grace time.Duration
	// DryRun finds orphans and deletes nothing.
	DryRun bool
	// ChunkSize is the cluster's chunk size (which chunks are past a
	// file's end).
	ChunkSize int64
	// ReleaseHeld, when above 0, releases reclaim records held for an
	// open-unlinked file longer than this: the client that held the file
	// open died without its last close (a live client's file loses its
	// bytes). Not in a dry run.
	ReleaseHeld time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// GCReport is what GC found and did.
type GCReport struct {
	Stores    int
	Chunks    int   // chunks listed
	Bytes     int64 // their bytes
	Orphans   int   // chunks no file owns, older than the grace period
	OrphanB   int64
	Young     int // orphan chunks left alone for the grace period
	Reclaimed int // orphan chunks deleted
	// PendingReclaims and HeldReclaims count the meta servers' reclaim
	// records: work the meta servers still owe (held: by an open file).
	PendingReclaims int
	HeldReclaims    int
	Released        int // held records released (ReleaseHeld)
	Errors          []string

	held []heldRecord
}

// heldRecord is a held reclaim record as readOwners found it.
type heldRecord struct {
	srv int
	key []byte
	rec *weftpb.ReclaimRecord
}

// gcCand is an orphan candidate: the chunks of ino on one store from index
// from on, which DeleteChunks(ino, from) would remove.
type gcCand struct {
	store int
	ino   core.Ino
	from  uint64
	infos []*weftpb.ChunkInfo
}

// GC finds chunks that no file owns on every store of c and, unless
// opts.DryRun, deletes them. The meta servers must be running or stopped
// as for Check; the stores must be running.
func GC(ctx context.Context, c *Cluster, opts GCOptions) (*GCReport, error) {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGCGrace
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.ChunkSize <= 0 {
		return nil, errs.New(errs.Invalid, "gc", "no chunk size")
	}
	rep := &GCReport{Stores: len(c.StoreAddrs)}
	listed := make([]map[core.Ino][]*weftpb.ChunkInfo, len(c.StoreAddrs))
	seen := map[core.Ino]bool{}
	for i, addr := range c.StoreAddrs {
		m, err := listChunks(ctx, c.Dial, addr, c.Timeout)
		if err != nil {
			return nil, err
		}
		listed[i] = m
		for ino, cs := range m {
			seen[ino] = true
			rep.Chunks += len(cs)
			for _, ci := range cs {
				rep.Bytes += ci.Size
			}
		}
	}
	first, err := readOwners(ctx, c, seen, rep)
	if err != nil {
		return nil, err
	}
	if opts.ReleaseHeld > 0 && !opts.DryRun {
		releaseHeld(ctx, c, rep, opts.Now().Add(-opts.ReleaseHeld).UnixNano())
	}
	cands := orphanCands(listed, first, opts.ChunkSize)
	if len(cands) == 0 {
		return rep, nil
	}
	// Read the owners again: a scan is no snapshot, and an entry that a
	// rename moved between servers during the first may have been missed.
	again := map[core.Ino]bool{}
	for _, cd := range cands {
		again[cd.ino] = true
	}
	second, err := readOwners(ctx, c, again, &GCReport{})
	if err != nil {
		return nil, err
	}
	cutoff := opts.Now().Add(-opts.Grace).UnixNano()
	for _, cd := range cands {
		if o, ok := second[cd.ino]; ok && (o.reclaim || o.size > cd.from*uint64(opts.ChunkSize)) {
			continue // owned after all
		}
		young := slices.ContainsFunc(cd.infos, func(ci *weftpb.ChunkInfo) bool { return ci.MtimeUnixNano > cutoff })
		if young {
			rep.Young += len(cd.infos)
			continue
		}
		rep.Orphans += len(cd.infos)
		for _, ci := range cd.infos {
			rep.OrphanB += ci.Size
		}
		if opts.DryRun {
			continue
		}
		// DeleteChunks removes every chunk from cd.from on, also those a
		// writer added since the listing: look again right before.
		if fresh, err := freshChunks(ctx, c.Dial, c.StoreAddrs[cd.store], c.Timeout, cd.ino, cd.from, cutoff); err != nil || fresh {
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("store %d: inode %d: %v", cd.store, cd.ino, err))
			}
			rep.Orphans -= len(cd.infos)
			rep.Young += len(cd.infos)
			continue
		}
		if err := deleteOn(ctx, c.Dial, c.StoreAddrs[cd.store], c.Timeout, cd.ino, cd.from, c.capability(cd.ino)); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("store %d: inode %d: %v", cd.store, cd.ino, err))
			continue
		}
		rep.Reclaimed += len(cd.infos)
		opts.Log.Info("gc deleted orphan chunks", "store", cd.store, "ino", cd.ino, "from", cd.from, "chunks", len(cd.infos))
	}
	return rep, nil
}

// chunkOwner is what the meta servers say about an inode that has chunks.
type chunkOwner struct {
	size    uint64 // a live regular file's size
	reclaim bool   // a reclaim record covers it: its meta server's work
}

// orphanCands lists, per store and inode, the chunks no owner covers: all
// of a dead inode's, or those past a live file's last chunk.
func orphanCands(listed []map[core.Ino][]*weftpb.ChunkInfo, owners map[core.Ino]chunkOwner, chunkSize int64) []gcCand {
	var out []gcCand
	for store, m := range listed {
		for ino, infos := range m {
			o, live := owners[ino]
			if o.reclaim {
				continue
			}
			from := uint64(0)
			if live {
				from = core.ChunkCount(o.size, chunkSize)
			}
			var past []*weftpb.ChunkInfo
			for _, ci := range infos {
				// A live file's parity units (erasure coding) sit above
				// every data index and are not past its end.
				if idx := ci.GetChunk().GetIndex(); idx >= from && !(live && erasure.IsParity(idx)) {
					past = append(past, ci)
				}
			}
			if len(past) == 0 {
				continue
			}
			if !live {
				from = past[0].GetChunk().GetIndex()
			}
			out = append(out, gcCand{store: store, ino: ino, from: from, infos: past})
		}
	}
	slices.SortFunc(out, func(a, b gcCand) int {
		if a.store != b.store {
			return a.store - b.store
		}
		return cmpIno(a.ino, b.ino)
	})
	return out
}

// listChunks reads every chunk a store holds, page by page.
func listChunks(ctx context.Context, dial rpc.DialOptions, addr string, timeout time.Duration) (map[core.Ino][]*weftpb.ChunkInfo, error) {
	out := map[core.Ino][]*weftpb.ChunkInfo{}
	err := eachChunkPage(ctx, dial, addr, timeout, &weftpb.ListChunksRequest{Limit: 1000}, func(page []*weftpb.ChunkInfo) bool {
		for _, ci := range page {
			ino := core.Ino(ci.GetChunk().GetIno())
			out[ino] = append(out[ino], ci)
		}
		return true
	})
	if err != nil {
		return nil, errs.Wrap(errs.KindOf(err), "gc", "list chunks of store "+addr, err)
	}
	return out, nil
}

// freshChunks reports whether store addr now holds a chunk of ino at or
// past from that changed after cutoff.
func freshChunks(ctx context.Context, dial rpc.DialOptions, addr string, timeout time.Duration, ino core.Ino, from uint64, cutoff int64) (bool, error) {
	fresh := false
	err := eachChunkPage(ctx, dial, addr, timeout, &weftpb.ListChunksRequest{Ino: uint64(ino), Limit: 1000}, func(page []*weftpb.ChunkInfo) bool {
		for _, ci := range page {
			if ci.GetChunk().GetIndex() >= from && ci.MtimeUnixNano > cutoff {
				fresh = true
				return false
			}
		}
		return true
	})
	return fresh, err
}

// eachChunkPage lists store addr's chunks as req asks, a page at a time
// (each call bounded by timeout), until fn returns false or the listing
// ends.
func eachChunkPage(ctx context.Context, dial rpc.DialOptions, addr string, timeout time.Duration, req *weftpb.ListChunksRequest, fn func([]*weftpb.ChunkInfo) bool) error {
	p := rpc.NewPeer(addr, dial)
	defer p.Close()
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var r weftpb.ListChunksReply
		err := p.Call(cctx, weftpb.MethodListChunks, req, &r)
		cancel()
		if err != nil {
			return err
		}
		if !fn(r.Chunks) || !r.More || len(r.Chunks) == 0 {
			return nil
		}
		req.After = r.Chunks[len(r.Chunks)-1].Chunk
	}
}

func deleteOn(ctx context.Context, dial rpc.DialOptions, addr string, timeout time.Duration, ino core.Ino, from uint64, capability []byte) error {
	p := rpc.NewPeer(addr, dial)
	defer p.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.Call(cctx, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: uint64(ino), From: from, Capability: capability}, &weftpb.DeleteChunksReply{})
}

// readOwners reads, from every meta server, the owners of the inodes in
// want: regular files (by their entries or standalone records) and reclaim
// records. It counts every reclaim record in rep.
func readOwners(ctx context.Context, c *Cluster, want map[core.Ino]bool, rep *GCReport) (map[core.Ino]chunkOwner, error) {
	out := map[core.Ino]chunkOwner{}
	for srv, st := range c.Meta {
		start, end := layout.TagRange(layout.TagEntry)
		err := scanRange(ctx, st, start, end, 0, func(k, v []byte) error {
			e, err := decodeEntry(v)
			if err != nil || e.Attr == nil || !want[core.Ino(e.Ino)] {
				return nil // fsck reports bad records; gc only reads good ones
			}
			noteOwner(out, core.Ino(e.Ino), e.Attr)
			return nil
		})
		if err != nil {
			return nil, err
		}
		start, end = layout.TagRange(layout.TagInode)
		err = scanRange(ctx, st, start, end, 0, func(k, v []byte) error {
			if len(k) != 9 || !want[layout.KeyIno(k)] {
				return nil
			}
			r, err := decodeInode(v)
			if err == nil && !r.Stub {
				noteOwner(out, layout.KeyIno(k), r)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		start, end = layout.TagRange(layout.TagReclaim)
		err = scanRange(ctx, st, start, end, 0, func(k, v []byte) error {
			if len(k) < 9 {
				return nil
			}
			rec, err := decodeReclaim(v)
			if err != nil {
				return nil
			}
			rep.PendingReclaims++
			if rec.Held {
				rep.HeldReclaims++
				rep.held = append(rep.held, heldRecord{srv: srv, key: k, rec: rec})
			}
			ino := layout.KeyIno(k)
			o := out[ino]
			o.reclaim = true
			out[ino] = o
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func noteOwner(out map[core.Ino]chunkOwner, ino core.Ino, r *weftpb.InodeRecord) {
	o := out[ino]
	size := r.Size
	if r.Inline {
		size = 0 // an inline file owns no chunk
	}
	o.size = max(o.size, size)
	out[ino] = o
}

// releaseHeld clears the held flag of the records created before cutoff
// (only ReleaseReclaim and this rewrite a held record; the reclaimer takes
// over once it sees it).
func releaseHeld(ctx context.Context, c *Cluster, rep *GCReport, cutoff int64) {
	for _, h := range rep.held {
		if h.rec.CreatedNs > cutoff {
			continue
		}
		h.rec.Held = false
		l, err := c.Meta[h.srv].Lock(ctx, []core.Ino{layout.KeyIno(h.key)}, false)
		if err == nil {
			err = l.Apply(ctx, []*weftpb.KeyOp{{Key: h.key, Value: marshal(h.rec)}})
			l.Unlock()
		}
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("meta %d: releasing a held reclaim: %v", h.srv, err))
			continue
		}
		rep.Released++
	}
}
