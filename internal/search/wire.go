package search

import (
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Bounds of a query on the wire: a request is refused past them.
const (
	MaxTests      = 64   // tests of each kind
	MaxPatternLen = 4096 // bytes of a pattern
)

// ToProto is q's wire form (paths stay with the client).
func (q *Query) ToProto() *weftpb.FindQuery {
	p := &weftpb.FindQuery{Types: q.Types, Uids: q.Uids, Gids: q.Gids}
	for _, g := range q.Names {
		p.Names = append(p.Names, &weftpb.FindGlob{Pattern: []byte(g.Pattern), Fold: g.Fold})
	}
	for _, r := range q.Sizes {
		p.Sizes = append(p.Sizes, &weftpb.FindRange{Lo: r.Lo, Hi: r.Hi})
	}
	for _, r := range q.Mtimes {
		p.Mtimes = append(p.Mtimes, &weftpb.FindRange{Lo: r.Lo, Hi: r.Hi})
	}
	for _, pm := range q.Perms {
		p.Perms = append(p.Perms, &weftpb.FindPerm{Kind: uint32(pm.Kind), Bits: pm.Bits})
	}
	for _, x := range q.Xattrs {
		p.Xattrs = append(p.Xattrs, []byte(x))
	}
	return p
}

// FromProto checks and converts a query from the wire.
func FromProto(op string, p *weftpb.FindQuery) (*Query, error) {
	if p == nil {
		return &Query{}, nil
	}
	for _, n := range []int{len(p.Names), len(p.Types), len(p.Sizes), len(p.Mtimes), len(p.Uids), len(p.Gids), len(p.Perms), len(p.Xattrs)} {
		if n > MaxTests {
			return nil, errs.New(errs.Invalid, op, "more than %d tests of one kind", MaxTests)
		}
	}
	q := &Query{Types: p.Types, Uids: p.Uids, Gids: p.Gids}
	for _, g := range p.Names {
		if len(g.Pattern) > MaxPatternLen {
			return nil, errs.New(errs.Invalid, op, "pattern longer than %d bytes", MaxPatternLen)
		}
		q.Names = append(q.Names, Glob{Pattern: string(g.Pattern), Fold: g.Fold})
	}
	for _, r := range p.Sizes {
		q.Sizes = append(q.Sizes, Range{r.Lo, r.Hi})
	}
	for _, r := range p.Mtimes {
		q.Mtimes = append(q.Mtimes, Range{r.Lo, r.Hi})
	}
	for _, pm := range p.Perms {
		if pm.Kind > uint32(PermAny) || pm.Bits&^0o7777 != 0 {
			return nil, errs.New(errs.Invalid, op, "bad permission test %d %o", pm.Kind, pm.Bits)
		}
		q.Perms = append(q.Perms, Perm{PermKind(pm.Kind), pm.Bits})
	}
	for _, x := range p.Xattrs {
		if len(x) == 0 || len(x) > 255 {
			return nil, errs.New(errs.Invalid, op, "bad extended attribute name")
		}
		q.Xattrs = append(q.Xattrs, string(x))
	}
	return q, nil
}
