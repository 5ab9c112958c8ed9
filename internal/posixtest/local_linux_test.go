package posixtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLocal checks the suite against the kernel: every case must pass on a
// local directory. As root, the permission cases run too, with per-thread
// identities (runAs); otherwise they skip.
func TestLocal(t *testing.T) {
	asRoot := os.Geteuid() == 0
	Run(t, func(t *testing.T) FS {
		root := t.TempDir()
		if asRoot {
			// t.TempDir makes 0700 directories; other users must reach the
			// root, which the cases treat as a 0755 "/".
			for _, d := range []string{filepath.Dir(root), root} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		return &localFS{root: root, canAs: asRoot}
	})
}
