package meta

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// memEnv opens a sync-mode server on a crashable in-memory file system.
func memEnv(t testing.TB, mod ...func(*Config)) (*env, *vfs.MemFS) {
	t.Helper()
	fs := vfs.NewCrashableMem()
	e := newEnv(t, append([]func(*Config){func(c *Config) { c.FS = fs; c.Dir = "/meta" }}, mod...)...)
	return e, fs
}

// crash stops e's server as a power cut would: the store reopens from what
// was synced to fs at this moment. The old server is abandoned, not closed
// (its Close would sync).
func (e *env) crash(fs *vfs.MemFS) *vfs.MemFS {
	e.t.Helper()
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	old := e.Server
	e.t.Cleanup(func() { old.Close() })
	e.cfg.FS = clone
	e.open()
	return clone
}

// TestCrashKeepsAcknowledged: in sync mode, every acknowledged create
// survives a power cut; the server reopens from synced data alone.
func TestCrashKeepsAcknowledged(t *testing.T) {
	e, fs := memEnv(t)
	for _, n := range []string{"a", "b", "c"} {
		e.create(rootCreds(), root, n, 0o644)
	}
	e.crash(fs)
	for _, n := range []string{"a", "b", "c"} {
		e.mustLookup(root, n)
	}
}
