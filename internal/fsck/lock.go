package fsck

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/proto/weftpb"
)

// lockSpec is what a check of one finding locks: the stripes of some inodes
// on every meta server, of others on one server each, and maybe the
// cluster's directory-move lock.
type lockSpec struct {
	all      []core.Ino         // on every server
	on       map[int][]core.Ino // by server
	renameMu bool
}

func (s *lockSpec) add(srv int, ino core.Ino) {
	if s.on == nil {
		s.on = map[int][]core.Ino{}
	}
	s.on[srv] = append(s.on[srv], ino)
}

// byServer returns the stripes to take on each server, ascending.
func (s *lockSpec) byServer(n int) map[int][]uint32 {
	out := map[int][]uint32{}
	addIno := func(srv int, ino core.Ino) { out[srv] = append(out[srv], stripeOf(ino)) }
	for srv := range n {
		for _, ino := range s.all {
			addIno(srv, ino)
		}
	}
	for srv, inos := range s.on {
		for _, ino := range inos {
			addIno(srv, ino)
		}
	}
	for srv, st := range out {
		slices.Sort(st)
		out[srv] = slices.Compact(st)
	}
	return out
}

// key identifies the stripes a spec takes, so that checks that take the
// same ones share one lock hold.
func (s *lockSpec) key(n int) string {
	by := s.byServer(n)
	srvs := make([]int, 0, len(by))
	for srv := range by {
		srvs = append(srvs, srv)
	}
	slices.Sort(srvs)
	var b strings.Builder
	if s.renameMu {
		b.WriteString("R;")
	}
	for _, srv := range srvs {
		b.WriteString(strconv.Itoa(srv))
		b.WriteByte(':')
		for _, st := range by[srv] {
			b.WriteString(strconv.FormatUint(uint64(st), 10))
			b.WriteByte(',')
		}
		b.WriteByte(';')
	}
	return b.String()
}

// inos returns the inodes to lock on srv (Store.Lock maps them to stripes).
func (s *lockSpec) inos(srv int) []core.Ino {
	return append(slices.Clone(s.all), s.on[srv]...)
}

// lockSet is the locks one check holds on several servers. They are taken
// in the cluster's global order (the directory-move lock, then servers by
// id; each server takes its stripes in ascending order), the order every
// coordinating meta server uses, so fsck never deadlocks with them.
type lockSet struct {
	c    *Cluster
	held map[int]Locked
	srvs []int // ascending
}

func (c *Cluster) lock(ctx context.Context, spec *lockSpec) (*lockSet, error) {
	by := spec.byServer(len(c.Meta))
	if spec.renameMu {
		if _, ok := by[0]; !ok {
			by[0] = nil
		}
	}
	ls := &lockSet{c: c, held: map[int]Locked{}}
	for srv := range by {
		ls.srvs = append(ls.srvs, srv)
	}
	slices.Sort(ls.srvs)
	for _, srv := range ls.srvs {
		l, err := c.Meta[srv].Lock(ctx, spec.inos(srv), srv == 0 && spec.renameMu)
		if err != nil {
			ls.release()
			return nil, err
		}
		ls.held[srv] = l
	}
	return ls, nil
}

// apply writes ops on srv, which must be one of the servers locked.
func (ls *lockSet) apply(ctx context.Context, srv int, ops []*weftpb.KeyOp) error {
	l, ok := ls.held[srv]
	if !ok {
		// A repair writes only where the check locked: writing unlocked
		// could break records that operations are changing.
		return errs.New(errs.Other, "fsck", "a repair would write on meta server %d, which it did not lock", srv)
	}
	return l.Apply(ctx, ops)
}

// release unlocks in the reverse order.
func (ls *lockSet) release() {
	for i := len(ls.srvs) - 1; i >= 0; i-- {
		if l, ok := ls.held[ls.srvs[i]]; ok {
			l.Unlock()
			delete(ls.held, ls.srvs[i])
		}
	}
}

func stripeOf(ino core.Ino) uint32 { return meta.LockStripe(ino) }
