package meta

import "testing"

// TestWALSyncsCounted: the durable-writes metric counts the WAL's fsyncs.
func TestWALSyncsCounted(t *testing.T) {
	e := newEnv(t)
	before := e.walSyncs()
	e.mkdir(rootCreds(), root, "d", 0o755)
	if after := e.walSyncs(); after <= before {
		t.Fatalf("WAL syncs %v before a synced mkdir and %v after", before, after)
	}
}
