package lease

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// recallTimeout bounds the sending of one recall message. A holder that
// cannot be reached loses its lease at the end of the term anyway.
const recallTimeout = time.Second

// Register installs the lock, session and lease methods on mux.
func (s *Service) Register(mux *rpc.Mux) {
	rpc.Handle(mux, weftpb.MethodSetLock, s.SetLock)
	rpc.Handle(mux, weftpb.MethodGetLock, s.GetLock)
	rpc.Handle(mux, weftpb.MethodLockKeepAlive, s.KeepAlive)
	rpc.Handle(mux, weftpb.MethodEndLockSession, s.EndSession)
	rpc.Handle(mux, weftpb.MethodLeaseAcquire, s.HandleAcquire)
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRelease, s.HandleRelease)
	rpc.Handle(mux, weftpb.MethodLeaseStatus, s.Status)
}

// Status serves LeaseStatus.
func (s *Service) Status(context.Context, *weftpb.LeaseStatusRequest) (*weftpb.LeaseStatusReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
	return &weftpb.LeaseStatusReply{Held: uint64(s.mu.held), Sessions: uint64(len(s.mu.sessions)),
		Granted: s.mu.granted, Recalled: s.mu.recalled, Expired: s.mu.expired}, nil
}

// KeepAlive extends a session's life; a session the service did not know
// starts now. It does not extend leases: a lease lasts one term from its
// grant (a keepalive that extended it could not tell the holder about a
// recall it missed).
func (s *Service) KeepAlive(_ context.Context, req *weftpb.LockKeepAliveRequest) (*weftpb.LockKeepAliveReply, error) {
	if req.Session == 0 {
		return nil, errs.New(errs.Invalid, "lock keepalive", "no lock session")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	_, known := s.mu.sessions[req.Session]
	s.touchLocked(req.Session, now)
	return &weftpb.LockKeepAliveReply{Known: known, TtlMs: uint32(s.ttl / time.Millisecond)}, nil
}

// EndSession releases every lock and lease of a session.
func (s *Service) EndSession(_ context.Context, req *weftpb.EndLockSessionRequest) (*weftpb.Empty, error) {
	if req.Session == 0 {
		return nil, errs.New(errs.Invalid, "end lock session", "no lock session")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
	s.dropSessionLocked(req.Session)
	return &weftpb.Empty{}, nil
}

// HandleAcquire serves LeaseAcquire. A request that did not come over a
// connection (an in-process call) has nowhere to receive recalls: it is
// granted nothing.
func (s *Service) HandleAcquire(ctx context.Context, req *weftpb.LeaseAcquireRequest) (*weftpb.LeaseAcquireReply, error) {
	holder := HolderOf(ctx)
	if holder == nil {
		return &weftpb.LeaseAcquireReply{}, nil
	}
	keys := make([]Key, len(req.Keys))
	for i, k := range req.Keys {
		keys[i] = Key(k)
	}
	g, err := s.Acquire(ctx, req.Session, holder, Mode(req.Mode), keys)
	if errs.Is(err, errs.Timeout) || errs.Is(err, errs.Canceled) || errs.Is(err, errs.Busy) {
		// The client stopped waiting, or must not wait: it caches
		// nothing.
		return &weftpb.LeaseAcquireReply{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &weftpb.LeaseAcquireReply{Granted: req.Keys, TermMs: uint32(g.Term / time.Millisecond), Seq: g.Seq}, nil
}

// HandleRelease serves the one-way LeaseRelease.
func (s *Service) HandleRelease(_ context.Context, req *weftpb.LeaseReleaseRequest) {
	s.log.Debug("lease release received", "session", req.Session, "keys", req.Keys, "seqs", req.Seqs)
	keys := make([]Key, len(req.Keys))
	for i, k := range req.Keys {
		keys[i] = Key(k)
	}
	s.Release(req.Session, keys, req.Seqs)
}

// HolderOf returns the Holder for the connection a request arrived on
// (recalls go back on it), or nil for an in-process call.
func HolderOf(ctx context.Context) Holder {
	c := rpc.ConnFromContext(ctx)
	if c == nil {
		return nil
	}
	return connHolder{c}
}

// connHolder sends recalls on a client's connection.
type connHolder struct{ c *rpc.Conn }

func (h connHolder) Recall(session uint64, keys []Key, seqs []uint64) {
	req := &weftpb.LeaseRecallRequest{Session: session, Keys: make([]uint64, len(keys)), Seqs: seqs}
	for i, k := range keys {
		req.Keys[i] = uint64(k)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), recallTimeout)
		defer cancel()
		_ = h.c.Send(ctx, weftpb.MethodLeaseRecall, req) // the term bounds a lost recall
	}()
}
