package fusefs

import (
	"path"
	"testing"

	"github.com/weftfs/weft/internal/posixtest"
)

// TestPOSIX runs the conformance suite through a real mount of a real
// cluster (one per case), with system calls from this process: as root, and
// as other users through per-thread identities (posixtest.LocalFSAs), whose
// requests the mount forwards with their uid, gid and groups.
func TestPOSIX(t *testing.T) {
	requireFUSE(t)
	posixtest.Run(t, func(t *testing.T) posixtest.FS {
		if reason, ok := posixKnownBugs[path.Base(t.Name())]; ok {
			t.Skip("known disagreement with Linux: " + reason)
		}
		m, _ := newMountedFS(t)
		return posixtest.LocalFSAs(m.Dir())
	})
}

// posixKnownBugs lists the cases where the mount disagrees with Linux, with
// the reason: each is skipped until fixed, and listed so that no skip is
// silent.
var posixKnownBugs = map[string]string{}
