package meta

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Recovery after a crash: the participant's side of the cross-server
// commit (dist.go, fence.go).
//
// A participant that crashes loses the locks it held for coordinators
// without a fence. A coordinator whose writes did not reach it committed
// its own part and left the participant's writes to its replay, computed
// under those locks. If a later operation changed the same records first,
// the replay would overwrite it (a directory's entry count, say, would lose
// the later operation's entry). So a meta server that restarts after a
// crash admits no write of its own and grants no lock until every peer has
// replayed what it owes it:
//
//   - keyRunning is set while the server runs and deleted by a clean Close
//     (which fences every lock it held), so Open knows whether it crashed.
//   - After a crash the server's writes wait (Server.awaitRecovery) while
//     it replays its own intents and then sends each peer PeerRelease,
//     whose handler replays that peer's intents for it before answering.
//     Replays themselves (PeerApply) are admitted.
//   - A peer that does not answer within recoveryBound is given up on: its
//     replay, when it comes back, finds neither locks nor a fence here and
//     applies as before (the gap that remains, a double failure), and the
//     server logs it.

// recoveryBound bounds how long a restarted server's writes wait for its
// peers' replays.
const recoveryBound = 15 * time.Second

// openRecovery records that the server runs and says whether its previous
// life ended in a crash.
func (s *Server) openRecovery() (crashed bool, err error) {
	_, crashed, err = getValue(s.db, keyRunning)
	if err != nil {
		return false, err
	}
	return crashed, s.setSync("meta open", keyRunning, []byte{1})
}

// closeRecovery records a clean stop: every lock held for a coordinator
// was fenced by closeGiga.
func (s *Server) closeRecovery() error {
	if s.failed.Load() != nil {
		return nil
	}
	b := s.db.NewBatch()
	defer s.release(b)
	b.Delete(keyRunning, nil)
	return s.commit("meta close", b, true)
}

// awaitRecovery waits until the server admits writes after a crash.
func (s *Server) awaitRecovery(ctx context.Context, op string) error {
	g := &s.giga
	select {
	case <-g.recovered:
		return nil
	default:
	}
	select {
	case <-g.recovered:
		return nil
	case <-ctx.Done():
		return ctxError(op, ctx.Err())
	case <-g.ctx.Done():
		return errs.New(errs.Unavailable, op, "meta server is closing")
	}
}

// recover takes the replays the peers owe this server, then admits writes.
// It runs in the replay loop, after the server's own first replay.
func (s *Server) recover() {
	g := &s.giga
	ctx, cancel := context.WithTimeout(g.ctx, recoveryBound)
	defer cancel()
	pending := map[int]bool{}
	for srv := range s.n {
		if srv != s.cfg.ID {
			pending[srv] = true
		}
	}
	for len(pending) > 0 {
		for srv := range pending {
			if s.releaseOn(ctx, srv) == nil {
				delete(pending, srv)
			}
		}
		if len(pending) == 0 || !sleepCtx(ctx, 100*time.Millisecond) {
			break
		}
	}
	if len(pending) > 0 && g.ctx.Err() == nil {
		s.log.Error("meta: peers did not replay what they owe this server after its crash; writes go on, and a late replay from them may overwrite later operations (run weft fsck)",
			"peers", len(pending))
	}
	close(g.recovered)
}

// releaseOn tells server srv that this server's previous life is over: it
// drops the locks that life held there and replays what it owes this one.
func (s *Server) releaseOn(ctx context.Context, srv int) error {
	return s.peerCall(ctx, "release", srv, weftpb.MethodPeerRelease,
		&weftpb.PeerReleaseRequest{Coordinator: uint32(s.cfg.ID), BelowTxid: s.giga.firstTxid}, &weftpb.Empty{})
}

// sleepCtx waits d unless ctx ends first, and says whether it waited.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
