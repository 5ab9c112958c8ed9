package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/fsck"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
)

// faultBound is how long any one client call may take while servers are
// killed, stopped and corrupted: the replica timeout's failover, a retry
// while a restarted server comes back, and slack for a loaded machine.
const faultBound = 30 * time.Second

// TestFaults is the fault suite (make faults runs more rounds): a workload
// of puts, overwrites, renames and deletes runs on two meta and three
// store processes (R=2) while stores are stopped (SIGSTOP), killed, lose
// their disk and have chunk files corrupted, and a meta server is killed.
// Once every server runs again and a repair pass has run, every name must
// hold what the workload was told (an acknowledged write exactly; a failed
// one never partly, never zeros for lost data), no call may have blocked
// past faultBound, fsck must be clean and no store may hold a chunk of a
// file that is gone.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	rounds := 1
	if s := os.Getenv("WEFT_FAULT_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 2, Store: 3, Replication: 2, SplitThreshold: 20})
	cfg := p.Config()
	c, err := client.New(ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+2*rounds)*time.Minute)
	defer cancel()
	if err := c.Mkdir(ctx, "/w", 0o755); err != nil {
		t.Fatal(err)
	}
	var names [2][]string
	for i := range 40 {
		names[i%2] = append(names[i%2], fmt.Sprintf("/w/f%02d", i))
	}
	m := newFaultModel(append(names[0], names[1]...), faultBound)

	for round := range rounds {
		work, stopWork := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range names {
			wg.Go(func() { faultWorker(work, c, m, names[w], uint64(round*10+w+1)) })
		}
		injectFaults(t, ctx, p, round)
		stopWork()
		wg.Wait()
		degradedChecks(t, ctx, p, c, m, round)
	}
	t.Logf("workload: %d operations, %d failed", m.ops, m.fails)
	repairUntilClean(t, ctx, p, cfg.Replication, storePeers(t, p))
	for _, bad := range m.check(ctx, c) {
		t.Errorf("after repair: %s", bad)
	}
	for _, s := range m.slow {
		t.Errorf("blocked past its bound: %s", s)
	}
	checkFsck(t, ctx, p)
	checkNoLeftoverChunks(t, ctx, p)
	for _, bad := range m.check(ctx, c) {
		t.Errorf("after gc: %s", bad)
	}
}

// checkNoLeftoverChunks waits for the meta servers' pending reclaims, runs
// weft gc with no grace (the workload has stopped), and checks that a second
// look finds no chunk that no file owns.
func checkNoLeftoverChunks(t *testing.T, ctx context.Context, p *Procs) {
	t.Helper()
	fc, err := fsck.Connect(ctx, p.Config(), 15*time.Second)
	if err != nil {
		t.Fatalf("fsck connect: %v", err)
	}
	defer fc.Close()
	waitfor.NoError(t, time.Minute, "the meta servers finish their reclaims and gc the rest", func() error {
		r, err := fsck.GC(ctx, fc, fsck.GCOptions{ChunkSize: int64(p.Config().ChunkSize), Grace: time.Millisecond})
		switch {
		case err != nil:
			return err
		case r.PendingReclaims != 0 || len(r.Errors) != 0:
			return fmt.Errorf("%+v", r)
		}
		t.Logf("gc: %d chunks, %d orphans reclaimed", r.Chunks, r.Reclaimed)
		return nil
	})
	r, err := fsck.GC(ctx, fc, fsck.GCOptions{ChunkSize: int64(p.Config().ChunkSize), Grace: time.Millisecond, DryRun: true})
	if err != nil {
		t.Fatalf("gc --dry-run: %v", err)
	}
	if r.Orphans != 0 || r.Young != 0 {
		t.Errorf("chunks left over after gc: %+v", r)
	}
}

// degradedChecks reads everything back before any repair, with one store
// emptied (its disk lost in the round's last fault); once repaired, with a
// chunk corrupted on another store; and once repaired again, with a third
// store stopped: every read must fail over to a good replica within the
// bound.
func degradedChecks(t *testing.T, ctx context.Context, p *Procs, c *client.Client, m *faultModel, round int) {
	t.Helper()
	for _, bad := range m.check(ctx, c) {
		t.Errorf("round %d, a store's disk lost, before repair: %s", round, bad)
	}
	// A second failure on top of a lost disk (a corrupt chunk, a stopped
	// store) is more than R = 2 survives: repair between them.
	repairUntilClean(t, ctx, p, p.Config().Replication, storePeers(t, p))
	if err := corruptChunk(p.Config().Store[(round+1)%3].Dir); err != nil {
		t.Fatal(err)
	}
	for _, bad := range m.check(ctx, c) {
		t.Errorf("round %d, a chunk corrupted: %s", round, bad)
	}
	repairUntilClean(t, ctx, p, p.Config().Replication, storePeers(t, p))
	s := round % 3
	if err := p.sendSignal(RoleStore, s, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.sendSignal(RoleStore, s, syscall.SIGCONT)
	for _, b := range m.check(ctx, c) {
		t.Errorf("round %d, store %d stopped: %s", round, s, b)
	}
}

// injectFaults runs one round of faults, each while the workload runs.
func injectFaults(t *testing.T, ctx context.Context, p *Procs, round int) {
	t.Helper()
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("round %d: %s: %v", round, what, err)
		}
	}
	pause(2 * time.Second)

	s := round % 3
	must("stop store", p.sendSignal(RoleStore, s, syscall.SIGSTOP))
	pause(4 * time.Second)
	must("continue store", p.sendSignal(RoleStore, s, syscall.SIGCONT))
	pause(time.Second)

	s = (round + 1) % 3
	must("kill store", p.Kill(RoleStore, s))
	pause(time.Second)
	must("restart store", p.Restart(ctx, RoleStore, s))
	pause(time.Second)

	s = (round + 2) % 3

	must("kill meta", p.Kill(RoleMeta, 1))
	pause(time.Second)
	must("restart meta", p.Restart(ctx, RoleMeta, 1))
	pause(time.Second)

	// A replaced disk: the store comes back with no chunks.
	must("kill store", p.Kill(RoleStore, s))
	must("lose the disk", os.RemoveAll(filepath.Join(p.Config().Store[s].Dir, "chunks")))
	must("restart store", p.Restart(ctx, RoleStore, s))
}

// sendSignal signals a running server (SIGSTOP, SIGCONT).
func (p *Procs) sendSignal(role Role, id int, sig syscall.Signal) error {
	p.mu.Lock()
	pr, err := p.findLocked(role, id)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.signal(pr, sig)
}

// corruptChunk flips the last byte of the largest chunk file under dir: a
// block that fails its checksum, which a read must fail over from and a
// verifying repair must rewrite.
func corruptChunk(dir string) error {
	var victim string
	var size int64
	err := filepath.WalkDir(filepath.Join(dir, "chunks"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil && info.Size() > size {
			victim, size = path, info.Size()
		}
		return nil
	})
	if err != nil || victim == "" {
		return err // no chunk yet: nothing to corrupt
	}
	f, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, size-1); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, size-1)
	return err
}

func storePeers(t *testing.T, p *Procs) []repair.Store {
	var out []repair.Store
	for _, s := range p.Config().Store {
		peer := rpc.NewPeer(s.Addr, p.dial)
		t.Cleanup(func() { peer.Close() })
		out = append(out, peer)
	}
	return out
}

// repairUntilClean runs verifying repair passes until one leaves every
// chunk on its replicas.
func repairUntilClean(t *testing.T, ctx context.Context, p *Procs, replication int, stores []repair.Store) {
	t.Helper()
	for pass := 1; ; pass++ {
		r, err := repair.Run(ctx, repair.Config{Stores: stores, Replication: replication, Only: -1, Verify: true,
			Capability: AdminCapability(p.Config(), auth.Read|auth.Write)})
		if err != nil {
			t.Fatalf("repair: %v", err)
		}
		t.Logf("repair pass %d: %v", pass, r)
		if r.Clean() {
			return
		}
		if pass == 5 {
			t.Errorf("repair left copies to make after %d passes: %v", pass, r)
			return
		}
	}
}

func checkFsck(t *testing.T, ctx context.Context, p *Procs) {
	t.Helper()
	fc, err := fsck.Connect(ctx, p.Config(), 15*time.Second)
	if err != nil {
		t.Fatalf("fsck connect: %v", err)
	}
	defer fc.Close()
	r, err := fsck.Check(ctx, fc, fsck.Options{})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !r.Clean() {
		t.Errorf("fsck is not clean: %+v", r)
	}
}
