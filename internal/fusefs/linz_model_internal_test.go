package fusefs

import (
	"testing"

	"github.com/weftfs/weft/internal/linz"
)

// TestLinzModel checks the history checker itself (internal/linz's known
// histories): it accepts histories that have a legal order, and finds the
// violations the FUSE tests look for (a name seen after a rename returned
// elsewhere, a stale mode, a stale reread, a create that went missing).
func TestLinzModel(t *testing.T) { linz.CheckCases(t) }
