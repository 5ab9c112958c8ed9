// Package weftbin builds the weft binary for the tests that run it as
// processes: once per test process, from this tree, removed when the
// package's tests end.
package weftbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path returns the binary, building it on first use; a failed build fails
// tb.
func Path(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		if _, err := exec.LookPath("go"); err != nil {
			built.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "weft-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "weft")
		out, err := exec.Command("go", "build", "-o", built.path, "github.com/weftfs/weft/cmd/weft").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		tb.Fatalf("building weft: %v", built.err)
	}
	return built.path
}

// Main runs the package's tests, removes the binary and exits: a
// package's TestMain calls it.
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
