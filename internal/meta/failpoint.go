package meta

import "github.com/weftfs/weft/internal/errs"

// Failpoints name the durability boundaries of the multi-step operations, so
// that a test can stop a server exactly there ("crash at point X, reopen,
// check"). Config.Failpoint is called with the name at each; nil in
// production. An error from it ends the operation at once, as a crash
// would: nothing after the point is written or sent, not even the release
// of other servers' locks (they expire, or the restarted server releases
// them). Locks of this process are released, so that it can still close.
const (
	// The coordinator of a cross-server operation (dist.go).
	FailDistIntentWritten      = "dist.intent-written"      // intent synced, no participant written
	FailDistParticipantsDone   = "dist.participants-done"   // every participant applied, coordinator not
	FailReplayParticipantsDone = "replay.participants-done" // a replay applied the participants, not yet the coordinator
	// The splitting server (split.go).
	FailSplitIntentWritten = "split.intent-written" // split intent synced, no partition installed
	FailSplitInstalled     = "split.installed"      // new partitions installed, the moved entries not yet deleted here
	// The server a split installs a new partition on (peer.go): the
	// install arrived, nothing of it is written yet.
	FailInstallReceived = "install.received"
)

// failpoint runs the test's hook at the named point.
func (s *Server) failpoint(name string) error {
	if s.cfg.Failpoint == nil {
		return nil
	}
	if err := s.cfg.Failpoint(name); err != nil {
		return errs.Wrap(errs.IO, "failpoint "+name, "", err)
	}
	return nil
}
