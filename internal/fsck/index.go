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
func (p *pass) checkIndexes(ctx context.Context) error {
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
