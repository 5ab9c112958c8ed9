package fsck

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/core"
)

// Options configure a check.
type Options struct {
	// Repair fixes what can be fixed safely (docs/cli.md lists what).
	Repair bool
	// Wait is how long a check of a running cluster lets unfinished
	// cross-server operations and splits finish (after a restart, meta
	// servers finish them in the background) before it reports them as
	// pending. 0 means DefaultWait, less than 0 not to wait; a stopped
	// cluster never waits.
	Wait time.Duration
	// MaxFindings caps the findings of each kind a report lists; the rest
	// are only counted. 0 means DefaultMaxFindings.
	MaxFindings int
	// Log receives progress at debug level; nil discards.
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultWait        = 10 * time.Second
	DefaultMaxFindings = 1000
	// maxRounds bounds the check-repair rounds of --repair: a repair can
	// leave work for the next round (an entry deleted as dangling was the
	// last name of nothing; an orphan directory's stub), but never an
	// endless chain.
	maxRounds = 3
	// maxCandidates bounds the suspicions one pass keeps to check again
	// under locks; more are counted and left for the next run.
	maxCandidates = 200000
	// groupSize bounds the checks made under one hold of the same locks.
	groupSize = 64
)

// Check reads every meta server's keys and reports what is wrong, checking
// each suspicion again under the locks of the records involved before it
// reports or repairs it: on a running cluster the scan is no snapshot, and
// operations that run meanwhile must not produce findings. With
// opts.Repair it repairs what it safely can and checks again, until a pass
// repairs nothing (at most three passes).
func Check(ctx context.Context, c *Cluster, opts Options) (*Report, error) {
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = DefaultMaxFindings
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	var repaired []Finding
	var notes []string
	for round := 1; ; round++ {
		p := newPass(c, opts)
		if err := p.run(ctx); err != nil {
			return nil, err
		}
		r := p.rep
		r.Rounds = round
		var fixed []Finding
		for _, f := range r.Findings {
			if f.Repaired {
				fixed = append(fixed, f)
			}
		}
		if !opts.Repair || len(fixed) == 0 || round == maxRounds {
			r.Findings = append(repaired, r.Findings...)
			r.Notes = append(notes, r.Notes...)
			sortFindings(r.Findings)
			return r, nil
		}
		repaired = append(repaired, fixed...)
		notes = append(notes, r.Notes...)
		opts.Log.Debug("fsck: repaired; checking again", "round", round, "repaired", len(fixed))
	}
}

// pass is one check of the whole cluster.
type pass struct {
	c    *Cluster
	n    int
	opts Options
	log  *slog.Logger
	rep  *Report

	mu       sync.Mutex // guards the maps while the servers are read in parallel
	layouts  map[core.Ino]*dirLayout
	inodes   map[core.Ino]*inodeInfo
	pending  []pendingRec
	badFinds []Finding
	cands    []candidate
	dropped  int // suspicions beyond maxCandidates

	// embedded lists, by server, the inodes whose attributes are in an
	// entry there (sorted after the scan): 8 bytes an entry is all the
	// scan keeps per file.
	embedded [][]uint64
	// dupInos are inodes named by more than one entry that may not be
	// (their attributes in an entry, or a directory), found after the
	// scan; locate finds their entries.
	dupInos map[core.Ino]bool
	// parentCands wait for the reference counts: a directory's parent is
	// judged only if one entry names it.
	parentCands []*entryCand
}

// inodeInfo is what the scan keeps of a standalone inode record.
type inodeInfo struct {
	srv    int
	dir    bool
	parent core.Ino
	nlink  uint32
	links  []linkRef // hard-linked files
	refs   int       // entries that point here
}

type linkRef struct {
	parent core.Ino
	name   string
}

func newPass(c *Cluster, opts Options) *pass {
	return &pass{
		c: c, n: len(c.Meta), opts: opts, log: opts.Log,
		rep:      &Report{Servers: len(c.Meta), Running: c.Running, Omitted: map[Kind]int{}},
		layouts:  map[core.Ino]*dirLayout{},
		inodes:   map[core.Ino]*inodeInfo{},
		embedded: make([][]uint64, len(c.Meta)),
		dupInos:  map[core.Ino]bool{},
	}
}

func (p *pass) run(ctx context.Context) error {
	start := time.Now()
	if p.c.Running {
		// Let what a restart left unfinished finish before judging.
		if _, err := p.waitForPending(ctx, nil); err != nil {
			return err
		}
	}
	if err := p.eachServer(ctx, p.scanRecords); err != nil {
		return err
	}
	if err := p.checkLayouts(ctx); err != nil {
		return err
	}
	p.log.Debug("fsck: records read", "directories", p.rep.Directories, "inodes", len(p.inodes), "took", time.Since(start))
	if err := p.eachServer(ctx, p.scanEntries); err != nil {
		return err
	}
	p.log.Debug("fsck: entries read", "entries", p.rep.Entries, "took", time.Since(start))
	p.afterEntries()
	if len(p.dupInos) > 0 {
		if err := p.eachServer(ctx, p.locate); err != nil {
			return err
		}
	}
	if err := p.eachServer(ctx, p.scanXattrs); err != nil {
		return err
	}
	if err := p.recheck(ctx); err != nil {
		return err
	}
	if err := p.checkIndexes(ctx); err != nil {
		return err
	}
	if err := p.finishPending(ctx); err != nil {
		return err
	}
	p.log.Debug("fsck: done", "findings", len(p.rep.Findings), "pending", len(p.rep.Pending), "took", time.Since(start))
	return nil
}

// eachServer runs fn for every meta server at once. The first error stops
// the others and is returned.
func (p *pass) eachServer(ctx context.Context, fn func(ctx context.Context, srv int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for srv := range p.n {
		wg.Go(func() {
			if err := fn(ctx, srv); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// suspect queues a suspicion to check again under locks.
func (p *pass) suspect(c candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cands) >= maxCandidates {
		p.dropped++
		return
	}
	p.cands = append(p.cands, c)
}

// addFinding adds a confirmed finding to the report, within the cap of its
// kind.
func (p *pass) addFinding(f Finding) {
	kept := 0
	for _, g := range p.rep.Findings {
		if g.Kind == f.Kind {
			kept++
			if g.Detail == f.Detail && g.Server == f.Server {
				return // two suspicions led to the same problem
			}
		}
	}
	if kept >= p.opts.MaxFindings {
		p.rep.Omitted[f.Kind]++
		return
	}
	p.rep.Findings = append(p.rep.Findings, f)
}

// recheck checks every suspicion again under the locks it needs, grouped
// so that suspicions needing the same locks share a hold, and repairs the
// confirmed ones if asked to. A suspicion about records that unfinished
// work (an intent, a split) is about to write waits for that work and is
// checked once more; if the work is still unfinished, the work is reported
// as pending instead.
func (p *pass) recheck(ctx context.Context) error {
	for _, f := range p.badFinds {
		p.addFinding(f)
	}
	if p.dropped > 0 {
		p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("%d more suspicions were not checked in this run: run fsck again", p.dropped))
	}
	cands := p.cands
	for attempt := 0; len(cands) > 0; attempt++ {
		deferred, err := p.checkAll(ctx, cands)
		if err != nil {
			return err
		}
		cands = nil
		var recs []pendingRec
		for _, d := range deferred {
			recs = append(recs, d.rec)
		}
		left, err := p.waitForPending(ctx, uniquePending(recs))
		if err != nil {
			return err
		}
		still := map[string]bool{}
		for _, r := range left {
			still[fmt.Sprintf("%d/%x", r.srv, r.key)] = true
		}
		for _, d := range deferred {
			if attempt == 0 && !still[fmt.Sprintf("%d/%x", d.rec.srv, d.rec.key)] {
				cands = append(cands, d.c)
			} else {
				p.pending = append(p.pending, d.rec)
			}
		}
	}
	return nil
}

// deferredCand is a suspicion that waits for unfinished work.
type deferredCand struct {
	c   candidate
	rec pendingRec
}

// checkAll checks cands, grouped by the locks they take. Some checks must
// come before others: stray extended attributes are judged by what the
// scan saw, before repairs move entries (and their attributes); entries
// are put right before counts are.
func (p *pass) checkAll(ctx context.Context, cands []candidate) ([]deferredCand, error) {
	slices.SortStableFunc(cands, func(a, b candidate) int { return a.order() - b.order() })
	p.rep.Suspicions += len(cands)
	type group struct {
		spec  *lockSpec
		cands []candidate
	}
	var groups []*group
	index := map[string]*group{}
	for _, c := range cands {
		spec := c.locks(p.n)
		k := fmt.Sprintf("%d|%s", c.order(), spec.key(p.n))
		g := index[k]
		if g == nil || len(g.cands) == groupSize {
			g = &group{spec: spec}
			index[k] = g
			groups = append(groups, g)
		}
		g.cands = append(g.cands, c)
	}
	var deferred []deferredCand
	for _, g := range groups {
		d, err := p.checkGroup(ctx, g.spec, g.cands)
		if err != nil {
			return nil, err
		}
		deferred = append(deferred, d...)
	}
	return deferred, nil
}

// checkGroup checks suspicions that need the same locks under one hold.
func (p *pass) checkGroup(ctx context.Context, spec *lockSpec, cands []candidate) ([]deferredCand, error) {
	ls, err := p.c.lock(ctx, spec)
	if err != nil {
		return nil, err
	}
	var after []func(context.Context) []string
	var deferred []deferredCand
	err = func() error {
		defer ls.release()
		rc := &rechecker{p: p, ls: ls}
		if err := rc.readBusy(ctx); err != nil {
			return err
		}
		for _, c := range cands {
			v, err := c.check(ctx, rc)
			if err != nil {
				return err
			}
			if v.pending != nil {
				deferred = append(deferred, deferredCand{c: c, rec: *v.pending})
				continue
			}
			if v.finding == nil {
				continue
			}
			f := *v.finding
			if v.plan != nil {
				f.Fixable, f.Repair = true, v.plan.what
			}
			if v.plan != nil && p.opts.Repair {
				if err := rc.carryOut(ctx, v.plan); err != nil {
					return err
				}
				f.Repaired = true
				if v.plan.after != nil {
					after = append(after, v.plan.after)
				}
			}
			p.addFinding(f)
		}
		return nil
	}()
	for _, fn := range after {
		p.rep.Notes = append(p.rep.Notes, fn(ctx)...)
	}
	return deferred, err
}
