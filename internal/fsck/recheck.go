package fsck

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// candidate is a suspicion from the scan. The scan is no snapshot of a
// running cluster, so a suspicion becomes a finding only if it holds when
// checked again under the locks of every record involved: no operation can
// then be half done on them, except one a crash interrupted, whose intent
// or split record says so (and which is reported as pending instead).
type candidate interface {
	// order ranks the checks: lower ranks run first.
	order() int
	// locks says what the check locks, in a cluster of n meta servers.
	locks(n int) *lockSpec
	// check looks again under the locks.
	check(ctx context.Context, rc *rechecker) (verdict, error)
}

// Ranks of the checks.
const (
	orderXattr = iota // judged by what the scan saw, before repairs move attributes
	orderPartition
	orderRecord
	orderMisplaced
	orderDangling
	orderParent
	orderCount // after the entries are put right
	orderOrphan
	orderLinks
	orderInode
)

// verdict is what a check concluded: nothing, a finding (with a repair
// plan if it can be repaired), or that the records wait for unfinished
// work.
type verdict struct {
	finding *Finding
	plan    *plan
	pending *pendingRec
}

// plan is a repair: writes applied in order, each step one synced batch on
// one server, ordered so that a crash between steps leaves a state fsck
// repairs on its next run (a copy before the delete of the original).
type plan struct {
	what  string
	steps []step
	// after runs once the locks are released (reclaiming chunks on the
	// store servers); it returns notes for the report.
	after func(ctx context.Context) []string
}

type step struct {
	srv int
	ops []*weftpb.KeyOp
}

func (pl *plan) add(srv int, ops ...*weftpb.KeyOp) {
	for i := range pl.steps {
		if pl.steps[i].srv == srv {
			pl.steps[i].ops = append(pl.steps[i].ops, ops...)
			return
		}
	}
	pl.steps = append(pl.steps, step{srv: srv, ops: ops})
}

// rechecker reads under a lock set.
type rechecker struct {
	p    *pass
	ls   *lockSet
	busy map[core.Ino]*pendingRec // inodes and directories unfinished work will write
	lays map[core.Ino]*dirLayout  // layouts read under these locks
}

// readBusy reads every server's intents and splits. It comes first: reads
// after it see either the state before an intent is replayed (and the
// intent) or the state after it.
func (rc *rechecker) readBusy(ctx context.Context) error {
	rc.busy = map[core.Ino]*pendingRec{}
	for srv, s := range rc.p.c.Meta {
		for _, tag := range []byte{layout.TagIntent, layout.TagSplit} {
			start, end := layout.TagRange(tag)
			err := scanRange(ctx, s, start, end, 0, func(k, v []byte) error {
				ref := &pendingRec{srv: srv, key: k, val: v}
				if tag == layout.TagSplit {
					if len(k) == 9 {
						rc.busy[layout.KeyIno(k)] = ref
					}
					return nil
				}
				ops, err := meta.IntentWrites(v)
				if err != nil {
					return nil // reported as pending, and as unreadable there
				}
				for _, o := range ops {
					if o.DeleteXattrsOf != 0 {
						rc.busy[core.Ino(o.DeleteXattrsOf)] = ref
					}
					if len(o.Key) >= 9 {
						rc.busy[layout.KeyIno(o.Key)] = ref
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// waiting returns a pending verdict if unfinished work writes any of inos.
func (rc *rechecker) waiting(inos ...core.Ino) (verdict, bool) {
	for _, ino := range inos {
		if ref, ok := rc.busy[ino]; ok {
			return verdict{pending: ref}, true
		}
	}
	return verdict{}, false
}

func (rc *rechecker) get(ctx context.Context, srv int, key []byte) ([]byte, bool, error) {
	return get(ctx, rc.p.c.Meta[srv], key)
}

// entry reads the entry at key on srv; found is false if it is missing or
// cannot be decoded (the scan reports undecodable records).
func (rc *rechecker) entry(ctx context.Context, srv int, key []byte) (*weftpb.EntryRecord, []byte, bool, error) {
	v, found, err := rc.get(ctx, srv, key)
	if err != nil || !found {
		return nil, nil, false, err
	}
	e, err := decodeEntry(v)
	if err != nil {
		return nil, nil, false, nil
	}
	return e, v, true, nil
}

// inode reads the record under "i" ino on srv (a standalone record or a
// partition stub).
func (rc *rechecker) inode(ctx context.Context, srv int, ino core.Ino) (*weftpb.InodeRecord, bool, error) {
	v, found, err := rc.get(ctx, srv, layout.InodeKey(ino))
	if err != nil || !found {
		return nil, false, err
	}
	r, err := decodeInode(v)
	if err != nil {
		return nil, false, nil
	}
	return r, true, nil
}

// layout reads dir's partition records on every server.
func (rc *rechecker) layout(ctx context.Context, dir core.Ino) (*dirLayout, error) {
	if l, ok := rc.lays[dir]; ok {
		return l, nil
	}
	l := &dirLayout{dir: dir}
	for srv := range rc.p.c.Meta {
		r, found, err := rc.inode(ctx, srv, dir)
		if err != nil {
			return nil, err
		}
		if !found || !r.Stub && !core.IsDir(r.Mode) {
			continue
		}
		if !r.Stub {
			if own, ok := owner(dir, rc.p.n); !ok || own != srv {
				continue // a record on the wrong server: reported as such
			}
			l.owner = true
		}
		l.parts = append(l.parts, newPart(srv, r))
	}
	l.judge(rc.p.n)
	if rc.lays == nil {
		rc.lays = map[core.Ino]*dirLayout{}
	}
	rc.lays[dir] = l
	return l, nil
}

// countOp returns the write that adds entries and subdirs to the counts of
// dir's partition record on srv, if that record is partition partition;
// nil if there is nothing to adjust.
func (rc *rechecker) countOp(ctx context.Context, srv int, dir core.Ino, partition uint32, entries, subdirs int) (*weftpb.KeyOp, error) {
	if entries == 0 && subdirs == 0 {
		return nil, nil
	}
	r, found, err := rc.inode(ctx, srv, dir)
	if err != nil || !found || !core.IsDir(r.Mode) || r.Partition != partition {
		return nil, err
	}
	r.Entries = uint64(max(0, int64(r.Entries)+int64(entries)))
	r.Nlink = uint32(max(2, int64(r.Nlink)+int64(subdirs)))
	return &weftpb.KeyOp{Key: layout.InodeKey(dir), Value: marshal(r)}, nil
}

// carryOut applies a plan's steps in order.
func (rc *rechecker) carryOut(ctx context.Context, pl *plan) error {
	rc.lays = nil // the repair may change partitions
	for _, st := range pl.steps {
		if len(st.ops) == 0 {
			continue
		}
		if err := rc.ls.apply(ctx, st.srv, st.ops); err != nil {
			return err
		}
	}
	return nil
}

// pendingRec is an intent or split record as the scan read it.
type pendingRec struct {
	srv      int
	key, val []byte
}

// describePending says what an intent or split record is waiting to do.
func describePending(k, v []byte) string {
	if len(k) != 9 {
		return fmt.Sprintf("record %x of unfinished work", k)
	}
	if k[0] == layout.TagSplit {
		s := &weftpb.SplitIntent{}
		if err := proto.Unmarshal(v, s); err != nil {
			return fmt.Sprintf("split of directory %d (unreadable: %v)", layout.KeyIno(k), err)
		}
		return fmt.Sprintf("split of partition %d (radix %d) of directory %d", s.Partition, s.Radix, layout.KeyIno(k))
	}
	in := &weftpb.Intent{}
	if err := proto.Unmarshal(v, in); err != nil {
		return fmt.Sprintf("cross-server operation %#x (unreadable: %v)", uint64(layout.KeyIno(k)), err)
	}
	var srvs []int
	for _, so := range in.Servers {
		srvs = append(srvs, int(so.Server))
	}
	if len(srvs) == 0 {
		return fmt.Sprintf("cross-server %s %#x, to finish on its coordinator", in.Op, uint64(layout.KeyIno(k)))
	}
	return fmt.Sprintf("cross-server %s %#x, to apply on meta %s", in.Op, uint64(layout.KeyIno(k)), idList(srvs))
}

// readPending reads every server's intents and splits.
func (p *pass) readPending(ctx context.Context) ([]pendingRec, error) {
	var recs []pendingRec
	for srv, s := range p.c.Meta {
		for _, tag := range []byte{layout.TagIntent, layout.TagSplit} {
			start, end := layout.TagRange(tag)
			err := scanRange(ctx, s, start, end, 0, func(k, v []byte) error {
				recs = append(recs, pendingRec{srv: srv, key: k, val: v})
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return recs, nil
}

// waitForPending waits, on a running cluster, until the intent and split
// records recs (every current one if nil) are gone, for at most
// opts.Wait; it returns those still there.
func (p *pass) waitForPending(ctx context.Context, recs []pendingRec) ([]pendingRec, error) {
	if recs == nil {
		var err error
		if recs, err = p.readPending(ctx); err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(p.opts.Wait)
	for len(recs) > 0 && p.c.Running && time.Now().Before(deadline) {
		p.log.Debug("fsck: waiting for unfinished work", "records", len(recs))
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		left := recs[:0]
		for _, r := range recs {
			v, found, err := get(ctx, p.c.Meta[r.srv], r.key)
			if err != nil {
				return nil, err
			}
			if found {
				left = append(left, pendingRec{srv: r.srv, key: r.key, val: v})
			}
		}
		recs = left
	}
	return recs, nil
}

// finishPending reports the unfinished work the scan found that is still
// unfinished (on a running cluster, after waiting for it).
func (p *pass) finishPending(ctx context.Context) error {
	left, err := p.waitForPending(ctx, uniquePending(p.pending))
	if err != nil {
		return err
	}
	for _, r := range left {
		p.rep.Pending = append(p.rep.Pending, Pending{Server: r.srv, What: describePending(r.key, r.val)})
	}
	slices.SortFunc(p.rep.Pending, func(a, b Pending) int {
		if a.Server != b.Server {
			return a.Server - b.Server
		}
		switch {
		case a.What < b.What:
			return -1
		case a.What > b.What:
			return 1
		}
		return 0
	})
	p.rep.Pending = slices.Compact(p.rep.Pending)
	return nil
}

// uniquePending drops repeated records (same server and key).
func uniquePending(recs []pendingRec) []pendingRec {
	seen := map[string]bool{}
	out := []pendingRec{}
	for _, r := range recs {
		k := fmt.Sprintf("%d/%x", r.srv, r.key)
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}
