package meta

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Bounds of one Scan reply (proto/fsck.proto).
const (
	scanDefaultLimit = 1024
	scanMaxLimit     = 4096
	scanMaxBytes     = 4 << 20
)

// Scan returns this server's raw keys and values in key order, for weft
// fsck. It reads without locks: each reply is a consistent snapshot of its
// own range, but a walk over many replies sees operations that commit
// meanwhile, so fsck checks what it finds again before repairing it.
func (s *Server) Scan(ctx context.Context, req *weftpb.ScanRequest) (*weftpb.ScanReply, error) {
	const op = "scan"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	return scanDB(s.db, req)
}

// scanDB serves a ScanRequest from db.
func scanDB(db *pebble.DB, req *weftpb.ScanRequest) (*weftpb.ScanReply, error) {
	const op = "scan"
	lower := req.Start
	if len(req.After) > 0 {
		// Keys are byte strings: key+"\x00" is the immediate successor.
		lower = append(slices.Clone(req.After), 0)
	}
	var upper []byte
	if len(req.End) > 0 {
		upper = req.End
		if bytes.Compare(lower, upper) >= 0 {
			return &weftpb.ScanReply{Eof: true}, nil
		}
	}
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = scanDefaultLimit
	case limit > scanMaxLimit:
		limit = scanMaxLimit
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	r := &weftpb.ScanReply{Eof: true}
	size := 0
	for it.First(); it.Valid(); it.Next() {
		if len(r.Pairs) == limit || size >= scanMaxBytes {
			r.Eof = false
			break
		}
		k, v := slices.Clone(it.Key()), slices.Clone(it.Value())
		size += len(k) + len(v)
		r.Pairs = append(r.Pairs, &weftpb.KeyOp{Key: k, Value: v})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	return r, nil
}

// LockStripe is the lock stripe that guards the records keyed by ino (a
// directory's entries and partition record, an inode's standalone record) on
// every meta server: what PeerLockRequest.stripes lists for them. weft fsck
// holds it while it checks a finding again and repairs it.
func LockStripe(ino core.Ino) uint32 { return uint32(stripeOf(ino)) }
