package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestStatusShowsDownServer: a server that does not answer is shown as
// down with the reason, the others are still shown, and status fails.
func TestStatusShowsDownServer(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--meta", "1", "--store", "2")
	file := filepath.Join(dir, "weft.toml")
	ctx := context.Background()
	if _, _, err := run(ctx, "--cluster", file, "mkdir", "-p", "/a/b"); err != nil {
		t.Fatal(err)
	}
	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(cluster.RoleStore, 1); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(ctx, "--cluster", file, "status")
	if ExitCode(err) != ExitUnavailable || !strings.Contains(err.Error(), "1 of 3 servers") {
		t.Errorf("status with a store down: %v (exit %d), want exit %d naming 1 of 3 servers", err, ExitCode(err), ExitUnavailable)
	}
	for _, want := range []string{
		`(?m)^meta +0 +127\.0\.0\.1:\d+ +up +\d+ +\d+`,
		`(?m)^store +0 +127\.0\.0\.1:\d+ +up +`,
		`(?m)^store +1 +127\.0\.0\.1:\d+ +down: .*connection refused`,
		`(?m)^META +DIR +INDEX +RADIX +ENTRIES$`,
		`(?m)^leases: \d+ held by \d+ client sessions; since start \d+ granted, \d+ recalled, \d+ expired unreleased$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("status output does not match %s:\n%s", want, out)
		}
	}

	st, err := statusJSON(t, file)
	if ExitCode(err) != ExitUnavailable {
		t.Errorf("status --json with a store down: %v", err)
	}
	if !st.Meta[0].Up || st.Meta[0].Dirs < 3 || !st.Store[0].Up || st.Store[1].Up || st.Store[1].Error == "" {
		t.Errorf("status --json = %+v", st)
	}
	if len(st.Top) == 0 || st.Top[0].Entries < 1 {
		t.Errorf("no largest partitions in %+v", st.Top)
	}
}

func TestStatusNeedsClusterFile(t *testing.T) {
	_, _, err := run(context.Background(), "--cluster", "", "status")
	if ExitCode(err) != ExitConfig {
		t.Errorf("status without a cluster file: %v", err)
	}
	_, _, err = run(context.Background(), "--cluster", "x.toml", "status", "--top", "-1")
	if ExitCode(err) != ExitUsage {
		t.Errorf("status --top -1: %v", err)
	}
}

func TestLargestPartitions(t *testing.T) {
	got := largestPartitions([][]*weftpb.PartitionStatus{
		{{Dir: 1, Entries: 10}, {Dir: 5, Index: 1, Radix: 1, Entries: 3}},
		{{Dir: 7, Entries: 40}, {Dir: 9, Entries: 10}},
	}, 3)
	want := []partitionStatus{{Meta: 1, Dir: 7, Entries: 40}, {Meta: 0, Dir: 1, Entries: 10}, {Meta: 1, Dir: 9, Entries: 10}}
	if len(got) != len(want) {
		t.Fatalf("largestPartitions = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("largestPartitions[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSumCounts(t *testing.T) {
	st := &clusterStatus{Meta: []metaStatus{
		{serverState: serverState{ID: 0, Up: true}},
		{serverState: serverState{ID: 1, Up: true}},
		{serverState: serverState{ID: 2}}, // down
	}}
	st.sumCounts([]*weftpb.StatusReply{
		{InodesByOwner: []int64{10, -3, -1}, DirsByOwner: []int64{4, -1, 0}},
		{InodesByOwner: []int64{-4, 8, -2}, DirsByOwner: []int64{-1, 3, 0}},
		nil,
	})
	for i, want := range []struct{ inodes, dirs int64 }{{6, 3}, {5, 2}, {0, 0}} {
		if m := st.Meta[i]; m.Inodes != want.inodes || m.Dirs != want.dirs {
			t.Errorf("meta %d: %d inodes, %d dirs; want %d and %d", i, m.Inodes, m.Dirs, want.inodes, want.dirs)
		}
	}
}

// TestStatusCountsReplicas: with R=2, status says how many chunks the
// stores hold and how many lack a copy; a store that cannot be listed makes
// the count incomplete, said so.
func TestStatusCountsReplicas(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--meta", "1", "--store", "3", "--replication", "2")
	file := filepath.Join(dir, "weft.toml")
	ctx := context.Background()
	local := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(local, make([]byte, 300<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := run(ctx, "--cluster", file, "put", local, "/big"); err != nil {
		t.Fatalf("put: %v\n%s", err, stderr)
	}
	out, _, err := run(ctx, "--cluster", file, "status")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^replicas \(R=2\): 1 chunks, 0 under-replicated$`).MatchString(out) {
		t.Errorf("status of a healthy R=2 cluster:\n%s", out)
	}
	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(cluster.RoleStore, 2); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(ctx, "--cluster", file, "status")
	if !strings.Contains(out, "incomplete count: stores [2] could not be listed") {
		t.Errorf("status with a store down does not say its replica count is incomplete:\n%s", out)
	}
}
