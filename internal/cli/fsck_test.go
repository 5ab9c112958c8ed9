package cli

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// TestFsck runs weft fsck on a running two-server cluster, on one with a
// server down, on the stopped cluster, and on the stopped cluster with an
// entry pointing to a missing inode, which --repair removes.
func TestFsck(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--meta", "2", "--store", "1", "--split-threshold", "4")
	file := filepath.Join(dir, "weft.toml")
	ctx := context.Background()
	if _, _, err := run(ctx, "--cluster", file, "mkdir", "-p", "/a/b", "/a/c", "/a/d", "/a/e", "/a/f"); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(ctx, "--cluster", file, "fsck")
	if err != nil || !strings.Contains(out, "2 meta servers, running") || !strings.Contains(out, "result: clean") {
		t.Fatalf("fsck of a running cluster: %v\n%s", err, out)
	}

	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(cluster.RoleMeta, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(ctx, "--cluster", file, "fsck", "--timeout", "2s"); ExitCode(err) != ExitUnavailable {
		t.Errorf("fsck with one of two meta servers down: %v (exit %d), want exit %d", err, ExitCode(err), ExitUnavailable)
	}
	if _, _, err := run(ctx, "cluster", "stop", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(ctx, "--cluster", file, "fsck")
	if err != nil || !strings.Contains(out, "stopped") || !strings.Contains(out, "result: clean") {
		t.Fatalf("fsck of a stopped cluster: %v\n%s", err, out)
	}

	// An entry of the root whose inode does not exist (and that the root's
	// entry count does not count).
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	o, err := meta.OpenOffline(cfg.Meta[0].Dir)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte{'d'}
	key = binary.BigEndian.AppendUint64(key, uint64(core.RootIno))
	key = binary.BigEndian.AppendUint32(key, 0)
	key = binary.BigEndian.AppendUint64(key, core.NameHash("ghost"))
	key = append(key, "ghost"...)
	val, _ := proto.Marshal(&weftpb.EntryRecord{Ino: uint64(core.MakeIno(1, 1<<40)), Mode: core.ModeFile | 0o644})
	err = o.Apply([]*weftpb.KeyOp{{Key: key, Value: val}})
	o.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = run(ctx, "--cluster", file, "fsck")
	if ExitCode(err) != ExitFailure || !strings.Contains(out, `dangling: meta 0: entry "ghost" of directory 1`) ||
		!strings.Contains(out, "(with --repair)") || !strings.Contains(out, "problems left") {
		t.Errorf("fsck of a dangling entry: %v (exit %d)\n%s", err, ExitCode(err), out)
	}
	out, _, err = run(ctx, "--cluster", file, "fsck", "--repair")
	if err != nil || !strings.Contains(out, "(done)") || !strings.Contains(out, "result: clean after repairing") {
		t.Errorf("fsck --repair: %v\n%s", err, out)
	}
	out, _, err = run(ctx, "--cluster", file, "fsck")
	if err != nil || !strings.Contains(out, "findings: none") {
		t.Errorf("fsck after the repair: %v\n%s", err, out)
	}
}

func TestFsckUsage(t *testing.T) {
	ctx := context.Background()
	if _, _, err := run(ctx, "--cluster", "", "fsck"); ExitCode(err) != ExitConfig {
		t.Errorf("fsck without a cluster file: %v", err)
	}
	if _, _, err := run(ctx, "--cluster", "x.toml", "fsck", "--timeout", "0s"); ExitCode(err) != ExitUsage {
		t.Errorf("fsck --timeout 0s: %v", err)
	}
	if _, _, err := run(ctx, "--cluster", "x.toml", "fsck", "extra"); ExitCode(err) != ExitUsage {
		t.Errorf("fsck with an argument: %v", err)
	}
}
