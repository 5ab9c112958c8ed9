package meta

import (
	"context"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// maxTopPartitions bounds StatusRequest.top_partitions.
const maxTopPartitions = 100

// Status summarises what this server holds, for weft status: it walks the
// directory records (one key per directory or partition, not per entry).
func (s *Server) Status(ctx context.Context, req *weftpb.StatusRequest) (*weftpb.StatusReply, error) {
	const op = "status"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	r := &weftpb.StatusReply{
		ServerId:   uint32(s.cfg.ID),
		Servers:    uint32(s.n),
		Inodes:     s.inodes.Load(),
		Dirs:       s.dirs.Load(),
		Durability: s.cfg.Durability,
		Splits:     s.giga.splits.Load(),
		Redirects:  s.giga.redirects.Load(),

		WritebackBatches: s.wbBatches.Load(),
		WritebackOps:     s.wbOps.Load(),
		WritebackRefused: s.wbRefused.Load(),
	}
	r.InodesByOwner, r.DirsByOwner = s.countsByOwner()
	top := int(min(req.TopPartitions, maxTopPartitions))
	p := []byte{tagInode}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if len(it.Key()) != 9 {
			continue
		}
		rec := &weftpb.InodeRecord{}
		if err := proto.Unmarshal(it.Value(), rec); err != nil || !core.IsDir(rec.Mode) {
			continue
		}
		r.Partitions++
		r.Entries += rec.Entries
		if top == 0 {
			continue
		}
		ps := &weftpb.PartitionStatus{Dir: binaryIno(it.Key()[1:]), Index: rec.Partition, Radix: rec.Radix, Entries: rec.Entries}
		i, _ := slices.BinarySearchFunc(r.Top, ps, func(a, b *weftpb.PartitionStatus) int {
			switch {
			case a.Entries > b.Entries:
				return -1
			case a.Entries < b.Entries:
				return 1
			}
			return 0
		})
		if i < top {
			r.Top = slices.Insert(r.Top, i, ps)
			if len(r.Top) > top {
				r.Top = r.Top[:top]
			}
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	return r, nil
}

func binaryIno(b []byte) uint64 {
	var x uint64
	for _, c := range b[:8] {
		x = x<<8 | uint64(c)
	}
	return x
}
