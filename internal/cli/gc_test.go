package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestGC runs weft gc and weft fsck's chunk line on a multi-process
// cluster: a chunk no file owns (written straight to a store, as a client
// that died before its commit leaves one) is an orphan for fsck and gc
// --dry-run once older than the grace, is deleted by gc, and the files'
// chunks stay.
func TestGC(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--meta", "1", "--store", "2")
	file := filepath.Join(dir, "weft.toml")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	local := filepath.Join(t.TempDir(), "data")
	data := bytes.Repeat([]byte("weft gc "), 1<<20) // 8 MiB: 2 chunks
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(ctx, "--cluster", file, "put", local, "/kept"); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	dial, err := cluster.DialOptions(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	p := rpc.NewPeer(cfg.Store[1].Addr, dial)
	defer p.Close()
	// The cluster checks capabilities: the test writes with the admin's.
	admin, _, err := auth.LoadMinter(cfg.CapabilitySecret, auth.AdminKeyID)
	if err != nil || admin == nil {
		t.Fatalf("admin minter: %v", err)
	}
	req := &weftpb.WriteChunkRequest{Chunk: &weftpb.ChunkID{Ino: 1<<40 + 7, Index: 2}, Sync: true, Capability: admin.Service(1<<40+7, auth.Write)}
	if _, err := p.CallData(ctx, weftpb.MethodWriteChunk, req, []byte("orphan"), &weftpb.WriteChunkReply{}); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(ctx, "--cluster", file, "fsck")
	if err != nil || !strings.Contains(out, "orphans older than 10m0s: 0") {
		t.Fatalf("fsck with a young orphan chunk: %v\n%s", err, out)
	}
	out, _, err = run(ctx, "--cluster", file, "gc", "--dry-run", "--grace", "1ns")
	if err == nil || !strings.Contains(out, "orphan chunks: 1 (6 bytes), dry run") {
		t.Fatalf("gc --dry-run: %v\n%s", err, out)
	}
	out, _, err = run(ctx, "--cluster", file, "gc", "--grace", "1ns")
	if err != nil || !strings.Contains(out, "orphan chunks: 1 (6 bytes), deleted: 1") {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	out, _, err = run(ctx, "--cluster", file, "gc", "--dry-run", "--grace", "1ns")
	if err != nil || !strings.Contains(out, "chunks: 2 ") || !strings.Contains(out, "orphan chunks: 0") {
		t.Fatalf("gc --dry-run after gc: %v\n%s", err, out)
	}
	got := filepath.Join(t.TempDir(), "got")
	if _, _, err := run(ctx, "--cluster", file, "get", "/kept", got); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the file after gc: %v, equal %v", err, bytes.Equal(b, data))
	}

	// weft rm leaves nothing behind: the meta server reclaims the chunks.
	if _, _, err := run(ctx, "--cluster", file, "rm", "/kept"); err != nil {
		t.Fatal(err)
	}
	waitfor.NoError(t, 30*time.Second, "weft rm leaves no chunks", func() error {
		out, _, err := run(ctx, "--cluster", file, "fsck")
		if err == nil && (!strings.Contains(out, "chunks: 0 on 2 stores") || !strings.Contains(out, "pending reclaims: 0")) {
			err = fmt.Errorf("chunks left:\n%s", out)
		}
		return err
	})
}
