package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/weftbin"
)

// TestMetaOnBrokenStoreExits is issue 12's item 7: a meta server whose store
// cannot be opened (here its data directory is a regular file; a full disk
// fails the same way, see meta's TestOpenOnFullDisk) exits at once with one
// message and the storage exit code, instead of looping on pebble errors.
func TestMetaOnBrokenStoreExits(t *testing.T) {
	bin := weftbin.Path(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "meta0")
	if err := os.WriteFile(notDir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(freeAddr(t), notDir)}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(freeAddr(t), filepath.Join(dir, "store0"))}
	file := filepath.Join(dir, "weft.toml")
	if err := cfg.Write(file); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "meta", "--config", file, "--id", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitStorage {
		t.Fatalf("weft meta on a broken store: %v after %v, want exit code %d\n%s", err, took, ExitStorage, stderr.String())
	}
	if took > 10*time.Second {
		t.Errorf("weft meta took %v to give up", took)
	}
	var msgs []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "weft: ") {
			msgs = append(msgs, l)
		}
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], notDir) {
		t.Errorf("want one message naming %s, got %q\n%s", notDir, msgs, stderr.String())
	}
	if n := strings.Count(stderr.String(), "\n"); n > 10 {
		t.Errorf("weft meta printed %d lines:\n%s", n, stderr.String())
	}
}

// freeAddr is a loopback address free a moment ago, with a port a server
// can stop and start again on (rpc.PickAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := rpc.PickAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
