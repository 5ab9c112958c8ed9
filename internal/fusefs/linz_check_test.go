package fusefs

import (
	"path/filepath"
	"testing"

	"github.com/weftfs/weft/internal/linz"
)

// The workload, model and check of the linearizability tests live in
// internal/linz, shared with the edge server's two-site test: one worker
// per mount does random operations of the model on its mount, each
// recorded with its call and return times; porcupine then looks for an
// order of the operations that respects those times and the model.

// linzEndWait bounds how long a test waits for a mount's operation in
// flight at its end.
const linzEndWait = linz.EndWait

// newLinz makes the namespace under mounts[0] (in directory linz) and one
// worker per mount (Start starts them).
func newLinz(t *testing.T, mounts []string, seed uint64) *linz.Run {
	t.Helper()
	var fss []linz.FS
	for _, m := range mounts {
		fss = append(fss, linz.OSFS{Root: filepath.Join(m, "linz")})
	}
	return linz.NewRun(t, fss, seed)
}
