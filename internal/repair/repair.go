package repair

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Config says what a pass repairs and how.
type Config struct {
	// Stores are every store server, index = store id in the cluster file.
	Stores      []Store
	Replication int
	// Erasure, when enabled, says the cluster erasure-codes its data:
	// a pass rebuilds stripe units instead of copying replicas
	// (erasure.go).
	Erasure erasure.Scheme
	// Only, when >= 0, restricts the pass to copies placed on that store
	// (a store's own background pass); -1 repairs every store.
	Only int
	// Ino, when non-zero, restricts the pass to one file's chunks.
	Ino uint64
	// DryRun counts what a pass would copy and copies nothing.
	DryRun bool
	// Verify reads every placed copy (the store checks its CRCs), so a
	// corrupt or cut copy is rewritten too. Without it a pass only
	// compares listings.
	Verify bool
	// MarkGrace is how old a stale parity mark must be before the pass
	// rewrites the stripe's parity (erasuremark.go); default
	// DefaultMarkGrace, < 0: any age.
	MarkGrace time.Duration
	// RateBytes bounds the bytes copied per second; 0: no bound.
	RateBytes int64
	// CallTimeout bounds each call to a store; default 30 s.
	CallTimeout time.Duration
	// Capability, if set, returns the capability to read and write ino's
	// chunks with (stores that check capabilities refuse calls without);
	// nil: none.
	Capability func(ino uint64) []byte
	Logger     *slog.Logger
}

// Report is what a pass found and did.
type Report struct {
	Chunks          int64 // distinct chunks seen
	UnderReplicated int64 // chunks with a placed copy missing, stale or bad
	Missing         int64 // placed copies absent
	Stale           int64 // placed copies with an older version
	Bad             int64 // placed copies that failed Verify
	Copied          int64 // copies written
	CopiedBytes     int64
	Raced           int64 // copies skipped because a writer changed the chunk meanwhile
	// Marked counts stripes whose parity a client's parity cache marked
	// stale (erasuremark.go); those with old marks get their parity
	// rewritten (counted in Stale).
	Marked int64
	Failed int64 // copies that failed; the next pass tries again
	// Unrecoverable counts copies that could not be made because no store
	// holds a readable copy of the chunk's newest version: data lost, which
	// reads report as EIO. Lost lists some of those chunks.
	Unrecoverable int64
	Lost          []*weftpb.ChunkID
	// Unreachable lists the stores whose listing failed: what they hold,
	// and so what they lack, is unknown to this pass.
	Unreachable []int
	// Completed lists the stores that had lost chunks (a replaced disk)
	// and that this pass marked complete: they serve reads again.
	Completed []int
}

// Clean reports whether the pass made every copy it could: nothing failed,
// raced or was unreachable (a dry run: found nothing to do). Chunks with no
// readable copy left (Unrecoverable) do not keep a pass from being clean:
// no later pass can copy them either, and their reads fail with EIO.
func (r *Report) Clean() bool {
	return r.Failed == 0 && r.Raced == 0 && len(r.Unreachable) == 0 && r.Copied+r.Unrecoverable == r.Missing+r.Stale+r.Bad
}

func (r *Report) String() string {
	return fmt.Sprintf("%d chunks, %d under-replicated (%d missing, %d stale, %d bad copies), %d stripes with stale parity marks; copied %d (%d bytes), %d raced, %d failed, %d unrecoverable, unreachable stores %v, completed stores %v",
		r.Chunks, r.UnderReplicated, r.Missing, r.Stale, r.Bad, r.Marked, r.Copied, r.CopiedBytes, r.Raced, r.Failed, r.Unrecoverable, r.Unreachable, r.Completed)
}

type pass struct {
	cfg Config
	// incomplete maps the stores that lost chunks to their formatting's
	// id: they serve no reads, so Verify trusts their versions.
	incomplete map[int]string

	rep     Report
	log     *slog.Logger
	start   time.Time
	listers []*lister
	// owner and lockSeq name the pass and its grants at the stripe
	// locks' stores (erasurelock.go).
	owner, lockSeq uint64
}

// Run makes one pass. It returns an error only when ctx ends or the
// configuration is wrong; what it could not repair is in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Stores) == 0 || cfg.Replication < 1 {
		return nil, errs.New(errs.Invalid, "repair", "%d stores, replication %d", len(cfg.Stores), cfg.Replication)
	}
	if cfg.Only >= len(cfg.Stores) {
		return nil, errs.New(errs.Invalid, "repair", "store %d of %d", cfg.Only, len(cfg.Stores))
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.MarkGrace == 0:
		cfg.MarkGrace = DefaultMarkGrace
	case cfg.MarkGrace < 0:
		cfg.MarkGrace = 0
	}
	p := &pass{cfg: cfg, log: cfg.Logger, start: time.Now()}
	for _, s := range cfg.Stores {
		p.listers = append(p.listers, &lister{store: s, ino: cfg.Ino})
	}
	p.incomplete = p.incompleteStores(ctx)
	if cfg.Erasure.Enabled() {
		p.runErasure(ctx)
	}
	for !cfg.Erasure.Enabled() {
		if err := ctx.Err(); err != nil {
			return &p.rep, errs.Wrap(errs.Canceled, "repair", "", err)
		}
		id, holders := p.next(ctx)
		if id == nil {
			break
		}
		p.rep.Chunks++
		p.repairChunk(ctx, id, holders)
	}
	for i, l := range p.listers {
		if l.err != nil {
			p.rep.Unreachable = append(p.rep.Unreachable, i)
			p.log.Warn("repair: listing a store failed", "store", i, "err", l.err)
		}
	}
	if !cfg.DryRun && cfg.Ino == 0 && p.rep.Clean() {
		p.markComplete(ctx, p.incomplete)
	}
	return &p.rep, ctx.Err()
}

// incompleteStores returns, for each store this pass repairs that says it
// lost chunks, the id of its formatting as the pass begins.
func (p *pass) incompleteStores(ctx context.Context) map[int]string {
	out := map[int]string{}
	for i, s := range p.cfg.Stores {
		if p.cfg.Only >= 0 && i != p.cfg.Only {
			continue
		}
		var r weftpb.StoreStatFSReply
		err := p.call(ctx, func(ctx context.Context) error {
			return s.Call(ctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &r)
		})
		if err == nil && r.GetIncomplete() {
			out[i] = r.GetId()
		}
	}
	return out
}

// markComplete tells each store that had lost chunks that it holds every
// chunk placed on it again. The id fences a store formatted anew since the
// pass began: it stays incomplete (errs.Stale).
func (p *pass) markComplete(ctx context.Context, incomplete map[int]string) {
	for i, id := range incomplete {
		err := p.call(ctx, func(ctx context.Context) error {
			return p.cfg.Stores[i].Call(ctx, weftpb.MethodMarkStoreComplete, &weftpb.MarkStoreCompleteRequest{Id: id}, &weftpb.MarkStoreCompleteReply{})
		})
		if err != nil {
			p.log.Warn("repair: marking a store complete failed", "store", i, "err", err)
			continue
		}
		p.rep.Completed = append(p.rep.Completed, i)
		p.log.Info("repair: store holds its chunks again", "store", i)
	}
}

// call runs fn with the pass's per-call bound.
func (p *pass) call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	return fn(ctx)
}

// next returns the smallest chunk id any store lists next, with what each
// store that lists it holds (index = store id, nil: not listed), and
// advances past it.
func (p *pass) next(ctx context.Context) (*weftpb.ChunkID, []*weftpb.ChunkInfo) {
	var lowest *weftpb.ChunkID
	for _, l := range p.listers {
		if c := l.peek(ctx, p.call); c != nil && (lowest == nil || less(c.GetChunk(), lowest)) {
			lowest = c.GetChunk()
		}
	}
	if lowest == nil {
		return nil, nil
	}
	holders := make([]*weftpb.ChunkInfo, len(p.listers))
	for i, l := range p.listers {
		if c := l.peek(ctx, p.call); c != nil && same(c.GetChunk(), lowest) {
			holders[i] = c
			l.pop()
		}
	}
	return lowest, holders
}
