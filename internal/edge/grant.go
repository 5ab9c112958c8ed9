package edge

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// renewMargin: the edge grants a client's lease only on an upstream lease
// trusted for at least the client's term and this much more.
const renewMargin = 100 * time.Millisecond

// grant serves a client's LeaseAcquire from the edge's own lease table,
// while the edge holds the upstream leases the grant rests on for longer
// than the grant's term: a read lease on either, a write lease on a write
// lease the edge holds upstream itself (delegated; delegate.go). Granting
// nothing (an empty reply) is the protocol's "without a lease": the answer
// to a client in this process, and to an upstream that could not grant in
// time.
func (u *upstream) grant(ctx context.Context, req *weftpb.LeaseAcquireRequest) (*weftpb.LeaseAcquireReply, error) {
	holder := lease.HolderOf(ctx)
	write := req.Mode == weftpb.LeaseMode_LEASE_WRITE
	if holder == nil || !write && req.Mode != weftpb.LeaseMode_LEASE_READ || len(req.Keys) == 0 {
		return &weftpb.LeaseAcquireReply{}, nil
	}
	keys := keysOf(req.Keys)
	hs, ok := u.ensure(ctx, keys, u.term+renewMargin, write)
	if !ok {
		return &weftpb.LeaseAcquireReply{}, nil
	}
	mode := lease.Read
	if write {
		mode = lease.Write
	}
	g, err := u.grants.Acquire(ctx, req.Session, holder, mode, keys)
	if errs.Is(err, errs.Timeout) || errs.Is(err, errs.Canceled) || errs.Is(err, errs.Busy) {
		return &weftpb.LeaseAcquireReply{}, nil
	}
	if err != nil {
		return nil, err
	}
	// A recall that came in meanwhile either found this grant in the
	// table (and recalls it) or removed an upstream lease it rests on:
	// then take it back before the client hears of it.
	if !u.current(keys, hs, time.Now().Add(g.Term)) {
		seqs := make([]uint64, len(keys))
		for i := range seqs {
			seqs[i] = g.Seq
		}
		u.grants.Release(req.Session, keys, seqs)
		return &weftpb.LeaseAcquireReply{}, nil
	}
	if write {
		u.edge.metrics.writeGranted.Add(float64(len(keys)))
	}
	return &weftpb.LeaseAcquireReply{Granted: req.Keys, TermMs: uint32(g.Term / time.Millisecond), Seq: g.Seq}, nil
}

// release serves a client's one-way LeaseRelease.
func (u *upstream) release(ctx context.Context, req *weftpb.LeaseReleaseRequest) {
	u.grants.HandleRelease(ctx, req)
}
