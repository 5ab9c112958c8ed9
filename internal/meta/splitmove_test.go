package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Issue 12, item 2: a split must not hold its directory's stripe across
// the installs on the new partitions' servers. These tests stall the
// install on the target server (its install.received failpoint) and check
// what the splitting server does meanwhile.

// promptly is how long an operation on the half of a splitting directory
// that stays may take; the install stalls until the test releases it.
const promptly = 3 * time.Second

// stall holds a server's failpoint until the test releases it.
type stall struct {
	reached chan struct{} // closed when the point is first reached
	release chan error    // what the point then returns
	once    sync.Once
}

// stallAt makes the first call of failpoint name on server id wait until
// free; later calls pass.
func (c *testCluster) stallAt(id int, name string) *stall {
	st := &stall{reached: make(chan struct{}), release: make(chan error, 1)}
	var hit atomic.Bool
	c.mu.Lock()
	c.hooks[id] = func(point string) error {
		if point != name || !hit.CompareAndSwap(false, true) {
			return nil
		}
		close(st.reached)
		select {
		case err := <-st.release:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("stall never released")
		}
	}
	c.mu.Unlock()
	c.t.Cleanup(func() { st.free(nil) })
	return st
}

// free lets the stalled point return err (once).
func (st *stall) free(err error) { st.once.Do(func() { st.release <- err }) }

func (st *stall) wait(c *testCluster) {
	c.t.Helper()
	c.eventually("the split's install reaches the target server", func() bool {
		select {
		case <-st.reached:
			return true
		default:
			return false
		}
	})
}

// freshName returns a name not yet used, with prefix, whose hash partition
// part of radix radix holds (or does not, if !in).
func freshName(prefix string, part, radix uint32, in bool) func() string {
	i := 0
	return func() string {
		for ; ; i++ {
			name := fmt.Sprintf("%s%d", prefix, i)
			if core.PartitionHolds(part, radix, core.NameHash(name)) == in {
				i++
				return name
			}
		}
	}
}

// soon runs fn in the background and reports, through the returned
// function, an error if it failed or did not return within promptly. The
// returned function waits for fn either way, so nothing outlives the test.
func soon(t *testing.T, what string, fn func(ctx context.Context) error) (check func()) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fn(cctx) }()
	select {
	case err := <-done:
		cancel()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return func() {}
	case <-time.After(promptly):
		t.Errorf("%s did not return within %v while the split installed", what, promptly)
	}
	return func() {
		defer cancel()
		err := <-done
		t.Logf("%s returned after %v: %v", what, time.Since(start), err)
	}
}

// record reads server id's record of dir.
func (c *testCluster) record(id int, dir core.Ino) *weftpb.InodeRecord {
	c.t.Helper()
	d := &weftpb.InodeRecord{}
	found, err := getRecord(c.srv(id).db, inodeKey(dir), d)
	if err != nil || !found {
		c.t.Fatalf("record of %d on server %d: found %v, %v", dir, id, found, err)
	}
	return d
}

// TestSplitServesTheStayingHalf splits the root from server 0 to server 1
// with the install on server 1 stalled. Meanwhile (a) creates, a mkdir, an
// unlink, a lookup, a stat, a chmod and a readdir page of names that stay on
// server 0 complete at once, (b) a create of a name that moves waits for the split
// and then lands on server 1, and (c) the root's records count what
// happened during the split.
func TestSplitServesTheStayingHalf(t *testing.T) {
	const threshold = 20
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 1 })
	s0 := c.srv(0)
	st := c.stallAt(1, FailInstallReceived)
	create := func(ctx context.Context, s *Server, name string) error {
		_, err := s.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true})
		return err
	}
	// Partition 0 keeps the names whose hash has bit 0 clear.
	stays := func(name string) bool { return core.PartitionHolds(0, 1, core.NameHash(name)) }
	want := map[string]bool{}
	for i := range threshold + 1 {
		name := fmt.Sprintf("n%d", i)
		if err := create(ctx, s0, name); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	st.wait(c)

	var old, gone string
	for name := range want {
		switch {
		case !stays(name):
		case old == "":
			old = name
		case gone == "":
			gone = name
		}
	}
	if gone == "" {
		t.Fatal("fewer than two of the first names stay on server 0")
	}
	c.clock.Advance()
	during := c.clock.Now().UnixNano()
	stay, move := freshName("s", 0, 1, true), freshName("m", 0, 1, false)
	file, sub, mv := stay(), stay(), move()

	var pending []func()
	pending = append(pending, soon(t, "create of a staying name", func(ctx context.Context) error {
		return create(ctx, s0, file)
	}))
	pending = append(pending, soon(t, "mkdir of a staying name", func(ctx context.Context) error {
		_, err := s0.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: sub, Mode: 0o755})
		return err
	}))
	pending = append(pending, soon(t, "unlink of a staying name", func(ctx context.Context) error {
		_, err := s0.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: gone})
		return err
	}))
	pending = append(pending, soon(t, "lookup of a staying name", func(ctx context.Context) error {
		_, err := s0.Lookup(ctx, &weftpb.LookupRequest{Creds: rootCreds(), Parent: root, Name: old})
		return err
	}))
	pending = append(pending, soon(t, "stat of the splitting directory", func(ctx context.Context) error {
		_, err := s0.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: rootCreds(), Node: inoRef(root)})
		return err
	}))
	pending = append(pending, soon(t, "chmod of the splitting directory", func(ctx context.Context) error {
		_, err := s0.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: inoRef(root),
			Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE), Mode: 0o750})
		return err
	}))
	var page *weftpb.ReadDirReply
	pending = append(pending, soon(t, "readdir of the splitting partition", func(ctx context.Context) error {
		var err error
		page, err = s0.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: root, Limit: 5})
		return err
	}))
	want[file], want[sub], want[mv] = true, true, true
	delete(want, gone)

	// A create of a moving name waits for the split.
	moved := make(chan error, 1)
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() { moved <- create(mctx, s0, mv) }()
	c.eventually("the create of a moving name waits", func() bool { return s0.giga.moving.waits.Load() > 0 })
	select {
	case err := <-moved:
		t.Fatalf("create of a moving name returned during the split: %v", err)
	default:
	}
	st.free(nil)
	for _, wait := range pending {
		wait()
	}
	if err := <-moved; errs.KindOf(err) == errs.WrongServer {
		// The client learns the new bitmap and asks partition 1's server.
		if err := create(ctx, c.srv(1), mv); err != nil {
			t.Fatalf("create of %s on server 1 after the split: %v", mv, err)
		}
	} else if err != nil {
		t.Fatalf("create of a moving name after the split: %v", err)
	}
	c.eventually("the split finishes", func() bool {
		return c.keysWithTag(0, tagSplit) == 0 && c.record(0, core.RootIno).Radix == 1
	})

	// Every name is in the partition its hash names, once.
	var here, there int
	seen := map[string]int{}
	for id := range 2 {
		for _, name := range c.entryNames(id, core.RootIno) {
			seen[name]++
			if stays(name) != (id == 0) {
				t.Errorf("%s is on server %d", name, id)
			}
			if id == 0 {
				here++
			} else {
				there++
			}
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%s is in %d partitions", name, seen[name])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d names in the partitions, want %d", len(seen), len(want))
	}

	// (c) The records count what happened during the split.
	d := c.record(0, core.RootIno)
	if d.Entries != uint64(here) || d.Nlink != 3 || d.MtimeNs != during || d.Radix != 1 {
		t.Errorf("root on server 0: %d entries, nlink %d, mtime %d, radix %d; want %d, 3, %d, 1",
			d.Entries, d.Nlink, d.MtimeNs, d.Radix, here, during)
	}
	p := c.record(1, core.RootIno)
	if !p.Stub || p.Partition != 1 || p.Entries != uint64(there) || p.Nlink != 2 {
		t.Errorf("root's partition on server 1: stub %v, partition %d, %d entries, nlink %d; want a stub of partition 1, %d, 2",
			p.Stub, p.Partition, p.Entries, p.Nlink, there)
	}

	// The new partition checks permissions with the mode set during the
	// split.
	c.eventually("the new partition has the directory's new mode", func() bool {
		return c.record(1, core.RootIno).Mode&core.ModeBits == 0o750
	})

	// The readdir page taken during the split, continued on both
	// partitions, lists every name once (mv was created after the page:
	// at most once).
	if page == nil {
		return
	}
	listed := map[string]int{}
	for _, e := range page.Entries {
		listed[e.Name]++
	}
	for id := range 2 {
		cookie := page.Cookie
		for {
			r, err := c.srv(id).ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: root, Cookie: cookie, Limit: 7})
			if err != nil {
				t.Fatalf("readdir of server %d after the split: %v", id, err)
			}
			for _, e := range r.Entries {
				listed[e.Name]++
			}
			if r.Eof {
				break
			}
			cookie = r.Cookie
		}
	}
	for name := range want {
		if listed[name] != 1 && (name != mv || listed[name] > 1) {
			t.Errorf("readdir across the split lists %s %d times", name, listed[name])
		}
	}
	if len(listed) > len(want) {
		t.Errorf("readdir across the split lists %d names, %d exist", len(listed), len(want))
	}
}

// TestSplitRemoteWritesWait stalls the split of a directory of server 0
// and renames files of a directory of server 1 into it, coordinated by
// server 1: a rename to a name that stays completes at once; one to a name
// that moves waits for the split and lands in the new partition.
func TestSplitRemoteWritesWait(t *testing.T) {
	const threshold = 8
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 1 })
	src, dst := c.dirOn(1, "s"), c.dirOn(0, "d")
	dir := core.Ino(dst.Ino)
	if core.PartitionServer(dir, 1, 2) != 1 || core.Ino(src.Ino).Server() != 1 {
		t.Fatalf("directories on the wrong servers: %d, %d", src.Ino, dst.Ino)
	}
	for _, name := range []string{"f", "g"} {
		if _, err := c.srv(1).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: name, Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
	}
	st := c.stallAt(1, FailInstallReceived)
	for i := range threshold + 1 {
		if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: dst.Ino, Name: fmt.Sprintf("n%d", i), Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
	}
	st.wait(c)
	stay, mv := freshName("s", 0, 1, true)(), freshName("m", 0, 1, false)()
	rename := func(ctx context.Context, from, to string) error {
		_, err := c.srv(1).Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: from, DstParent: dst.Ino, DstName: to})
		return err
	}
	wait := soon(t, "rename into the staying half", func(ctx context.Context) error { return rename(ctx, "f", stay) })
	moved := make(chan error, 1)
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() { moved <- rename(mctx, "g", mv) }()
	c.eventually("the rename into the moving half waits", func() bool { return c.srv(0).giga.moving.waits.Load() > 0 })
	select {
	case err := <-moved:
		t.Fatalf("rename into the moving half returned during the split: %v", err)
	default:
	}
	st.free(nil)
	wait()
	if err := <-moved; err != nil {
		t.Fatalf("rename into the moving half after the split: %v", err)
	}
	c.eventually("the split finishes", func() bool { return c.keysWithTag(0, tagSplit) == 0 })
	on := map[string]int{}
	for id := range 2 {
		for _, name := range c.entryNames(id, dir) {
			on[name] = id + 1
		}
	}
	if on[stay] != 1 || on[mv] != 2 {
		t.Errorf("%s on server %d, %s on server %d; want 0 and 1", stay, on[stay]-1, mv, on[mv]-1)
	}
	if names := c.entryNames(1, core.Ino(src.Ino)); len(names) != 0 {
		t.Errorf("source directory still holds %v", names)
	}
}

// TestSplitAbortLeavesDirectoryAsBefore fails the install of a split: the
// directory stays as it was (one partition, the moving names writable on
// server 0 again), and once the target answers the split is retried and
// every name ends up in one partition.
func TestSplitAbortLeavesDirectoryAsBefore(t *testing.T) {
	const threshold = 20
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 1 })
	s0 := c.srv(0)
	var failing atomic.Bool
	failing.Store(true)
	st := &stall{reached: make(chan struct{}), release: make(chan error, 1)}
	t.Cleanup(func() { st.free(nil) })
	var hit atomic.Bool
	c.mu.Lock()
	c.hooks[1] = func(point string) error {
		if point != FailInstallReceived || !failing.Load() {
			return nil
		}
		if hit.CompareAndSwap(false, true) {
			close(st.reached)
			select {
			case <-st.release:
			case <-time.After(30 * time.Second):
			}
		}
		return errors.New("target down")
	}
	c.mu.Unlock()
	create := func(ctx context.Context, name string) error {
		_, err := s0.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true})
		return err
	}
	names := []string{}
	for i := range threshold + 1 {
		name := fmt.Sprintf("n%d", i)
		if err := create(ctx, name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	st.wait(c)
	move := freshName("m", 0, 1, false)
	mv := move()
	moved := make(chan error, 1)
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() { moved <- create(mctx, mv) }()
	c.eventually("the create of a moving name waits", func() bool { return s0.giga.moving.waits.Load() > 0 })
	st.free(nil)
	if err := <-moved; err != nil {
		t.Fatalf("create of a moving name after the failed install: %v", err)
	}
	names = append(names, mv)
	// While the target is down, the directory is what it was.
	if d := c.record(0, core.RootIno); d.Radix != 0 {
		t.Errorf("root's radix after a failed split: %d", d.Radix)
	}
	mv2 := move()
	if err := create(ctx, mv2); err != nil {
		t.Fatalf("create of a moving name while the target is down: %v", err)
	}
	names = append(names, mv2)
	failing.Store(false)
	c.eventually("the split is retried and finishes", func() bool {
		return c.keysWithTag(0, tagSplit) == 0 && c.record(0, core.RootIno).Radix == 1
	})
	seen := map[string]int{}
	for id := range 2 {
		for _, name := range c.entryNames(id, core.RootIno) {
			seen[name]++
		}
	}
	for _, name := range names {
		if seen[name] != 1 {
			t.Errorf("%s is in %d partitions", name, seen[name])
		}
	}
	for _, name := range []string{mv, mv2} {
		if err := c.on(func(s *Server) error {
			_, err := s.Lookup(ctx, &weftpb.LookupRequest{Creds: rootCreds(), Parent: root, Name: name})
			return err
		}); err != nil {
			t.Errorf("lookup %s after the split: %v", name, err)
		}
	}
}

// TestCrashAfterMoveInstalled crashes the splitting server after the
// stalled install went in, with operations on the staying half done
// during the install: after the restart the split is done again from the
// partition as it then is, and nothing of those operations is lost.
func TestCrashAfterMoveInstalled(t *testing.T) {
	const threshold = 20
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 1 })
	st := c.stallAt(1, FailInstallReceived)
	create := func(s *Server, name string) error {
		_, err := s.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true})
		return err
	}
	want := map[string]bool{}
	for i := range threshold + 1 {
		name := fmt.Sprintf("n%d", i)
		if err := create(c.srv(0), name); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	st.wait(c)
	stay := freshName("s", 0, 1, true)
	for range 3 {
		name := stay()
		if err := create(c.srv(0), name); err != nil {
			t.Fatalf("create of a staying name during the install: %v", err)
		}
		want[name] = true
	}
	sub := stay()
	if _, err := c.srv(0).Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: sub, Mode: 0o755}); err != nil {
		t.Fatalf("mkdir of a staying name during the install: %v", err)
	}
	want[sub] = true
	crashed := c.crashAt(0, FailSplitInstalled)
	st.free(nil)
	c.eventually("server 0 crashes after the install", func() bool {
		select {
		case <-crashed:
			return true
		default:
			return false
		}
	})
	c.restart(0)
	c.eventually("the restarted server finishes the split", func() bool {
		return c.keysWithTag(0, tagSplit) == 0 && c.record(0, core.RootIno).Radix == 1
	})
	seen := map[string]int{}
	here := 0
	for id := range 2 {
		for _, name := range c.entryNames(id, core.RootIno) {
			seen[name]++
			if id == 0 {
				here++
			}
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%s is in %d partitions", name, seen[name])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d names in the partitions, want %d", len(seen), len(want))
	}
	if d := c.record(0, core.RootIno); d.Entries != uint64(here) || d.Nlink != 3 {
		t.Errorf("root on server 0: %d entries, nlink %d; want %d, 3", d.Entries, d.Nlink, here)
	}
}

// TestFailedSplitRetriesPaced fails every install of a split: the split is
// retried about once per replay interval, not in a loop that keeps the
// moving names waiting (and logs a warning per attempt).
func TestFailedSplitRetriesPaced(t *testing.T) {
	const threshold = 20
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 1 })
	var mu sync.Mutex
	var attempts []time.Time
	c.mu.Lock()
	c.hooks[1] = func(point string) error {
		if point != FailInstallReceived {
			return nil
		}
		mu.Lock()
		attempts = append(attempts, time.Now())
		mu.Unlock()
		return errors.New("target down")
	}
	c.mu.Unlock()
	for i := range threshold + 1 {
		if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: fmt.Sprintf("n%d", i), Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually("the split is tried three times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < 3; i++ {
		if gap := attempts[i].Sub(attempts[i-1]); gap < replayInterval/2 {
			t.Errorf("attempt %d came %v after the one before; want about %v", i+1, gap, replayInterval)
		}
	}
}

// TestFailedSplitRemovesWhatItInstalled splits the root of three servers
// two levels deep, to servers 1 and 2, with the install on server 2
// failing: server 1's new partition is removed again (nothing routes
// there, and it would take server 1's own cross-server writes), and once
// server 2 answers the split is done.
func TestFailedSplitRemovesWhatItInstalled(t *testing.T) {
	const threshold = 20
	c := newTestCluster(t, 3, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = threshold, 2 })
	var failing atomic.Bool
	var attempts atomic.Int32
	failing.Store(true)
	c.mu.Lock()
	c.hooks[2] = func(point string) error {
		if point != FailInstallReceived || !failing.Load() {
			return nil
		}
		attempts.Add(1)
		return errors.New("target down")
	}
	c.mu.Unlock()
	var names []string
	for i := range threshold + 1 {
		name := fmt.Sprintf("n%d", i)
		if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	c.eventually("the split fails on server 2", func() bool { return attempts.Load() > 0 })
	c.eventually("server 1 holds nothing of the root", func() bool {
		found, err := getRecord(c.srv(1).db, inodeKey(core.RootIno), &weftpb.InodeRecord{})
		return err == nil && !found && len(c.entryNames(1, core.RootIno)) == 0
	})
	failing.Store(false)
	c.eventually("the split is retried and finishes", func() bool {
		return c.keysWithTag(0, tagSplit) == 0 && c.record(0, core.RootIno).Radix == 2
	})
	seen := map[string]int{}
	for id := range 3 {
		for _, name := range c.entryNames(id, core.RootIno) {
			seen[name]++
		}
	}
	for _, name := range names {
		if seen[name] != 1 {
			t.Errorf("%s is in %d partitions", name, seen[name])
		}
	}
}
