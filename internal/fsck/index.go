package fsck

import (
	"context"
	"fmt"
)

// checkIndexes compares each stopped meta server's search index with what
// its records imply (meta.Offline.CheckIndex). A running cluster's index
// changes under the scan, and its servers check it themselves at no cost:
// the index is derived from every batch they apply. --repair drops the
// index, which the server rebuilds when it opens next.
//
// The index follows the records, so it is judged only once they are sound:
// while other findings remain it is not checked, and after repairs of a
// stopped cluster every index is dropped (records fsck moved or deleted
// may have left index keys another damaged record also implied).
func (p *pass) checkIndexes(ctx context.Context) error {
	if len(p.rep.Findings) > 0 {
		return p.dropIndexesAfterRepair()
	}
	for srv, s := range p.c.Meta {
		off, ok := s.(offlineStore)
		if !ok {
			continue
		}
		problems, err := off.o.CheckIndex()
		if err != nil {
			return err
		}
		if len(problems) == 0 {
			continue
		}
		f := Finding{Kind: KindIndex, Server: srv, Fixable: true,
			Detail: fmt.Sprintf("%d search index keys disagree with the records, first: %s", len(problems), problems[0]),
			Repair: "drop the index; the server rebuilds it when it opens"}
		if p.opts.Repair {
			if err := off.o.DropIndex(); err != nil {
				return err
			}
			f.Repaired = true
		}
		p.addFinding(f)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// dropIndexesAfterRepair drops every stopped server's index if this pass
// repaired records.
func (p *pass) dropIndexesAfterRepair() error {
	repaired := false
	for _, f := range p.rep.Findings {
		repaired = repaired || f.Repaired
	}
	if !repaired {
		return nil
	}
	for _, s := range p.c.Meta {
		if off, ok := s.(offlineStore); ok {
			if err := off.o.DropIndex(); err != nil {
				return err
			}
		}
	}
	p.rep.Notes = append(p.rep.Notes, "search indexes dropped after the repairs: each meta server rebuilds its own when it starts")
	return nil
}
