package meta

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// diskFault fails the writes and syncs of the files whose name ends in
// suffix with errno while it is on, as a disk that filled up (ENOSPC) or
// went bad (EIO) would.
type diskFault struct {
	on       atomic.Bool
	suffix   string
	errno    syscall.Errno
	dataOnly bool // creating files works, writing them fails
}

func (f *diskFault) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.HasSuffix(op.Path, f.suffix) {
		return nil
	}
	if f.dataOnly && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData,
		errorfs.OpFileSyncTo, errorfs.OpFilePreallocate, errorfs.OpCreate, errorfs.OpReuseForWrite:
		return fmt.Errorf("injected: %w", f.errno)
	}
	return nil
}

func (f *diskFault) String() string { return "diskFault" }

// faultyEnv opens a sync-mode server on an in-memory file system whose WAL
// writes fail while the returned fault is on.
func faultyEnv(t *testing.T, errno syscall.Errno, mod ...func(*Config)) (*env, *diskFault, *vfs.MemFS) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	fault := &diskFault{suffix: ".log", errno: errno}
	e := newEnv(t, append([]func(*Config){func(c *Config) {
		c.FS = errorfs.Wrap(mem, fault)
		c.Dir = "/meta"
	}}, mod...)...)
	return e, fault, mem
}

// within runs fn and fails the test if it does not return within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestWALFailureRefusesWrites is issue 12's item 2b and 7: a meta server
// whose WAL writes fail (a full disk, a failing disk) answers every create
// promptly with an error of the right kind, never acknowledges one, keeps
// serving reads without the failed creates (nothing unacknowledged is
// visible), refuses writes even after space comes back, and closes.
func TestWALFailureRefusesWrites(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		kind  errs.Kind
	}{{syscall.ENOSPC, errs.NoSpace}, {syscall.EIO, errs.IO}} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			e, fault, _ := faultyEnv(t, tc.errno)
			e.create(rootCreds(), root, "before", 0o644)
			fault.on.Store(true)

			const workers, each = 8, 25
			var acked atomic.Int64
			var mu sync.Mutex
			var bad []error
			within(t, 20*time.Second, "creates on a failing disk", func() {
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := range each {
							name := fmt.Sprintf("f%d.%d", w, i)
							_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true})
							if err == nil {
								acked.Add(1)
								continue
							}
							if errs.KindOf(err) != tc.kind {
								mu.Lock()
								bad = append(bad, err)
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
			})
			if acked.Load() != 0 || len(bad) > 0 {
				t.Fatalf("%d creates acknowledged on a failing disk, %d wrong errors (first %v)", acked.Load(), len(bad), first(bad))
			}

			// Space comes back: the server still refuses writes (its store's
			// state is unknown until a restart), promptly, with its reason.
			fault.on.Store(false)
			var mkdirErr error
			within(t, 10*time.Second, "mkdir after the failure", func() {
				_, mkdirErr = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "later", Mode: 0o755})
			})
			wantKind(t, mkdirErr, tc.kind)
			if !strings.Contains(mkdirErr.Error(), "refuses writes") {
				t.Errorf("refusal does not say why: %v", mkdirErr)
			}
			within(t, 10*time.Second, "reads after the failure", func() {
				if _, err := e.lookup(rootCreds(), root, "before"); err != nil {
					t.Errorf("lookup of an acknowledged create: %v", err)
				}
				if _, err := e.lookup(rootCreds(), root, "f0.0"); errs.KindOf(err) != errs.NotExist {
					t.Errorf("lookup of a failed create: %v, want NotExist", err)
				}
				r, err := e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: root, Limit: 1000})
				if err != nil || len(r.Entries) != 1 || r.Entries[0].Name != "before" {
					t.Errorf("listing after failed creates: %d entries, %v; want [before]", len(r.GetEntries()), err)
				}
			})
			within(t, 10*time.Second, "Close", func() { e.Server.Close() })
			e.Server = nil
		})
	}
}

func first(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// TestWALFailureAsync: in async mode no commit waits for the WAL, so the
// first sign of a full disk is pebble's own panic inside its commit
// pipeline (its WAL writer keeps the error). The server must catch it, fail
// every later call promptly and still close.
func TestWALFailureAsync(t *testing.T) {
	e, fault, _ := faultyEnv(t, syscall.ENOSPC, func(c *Config) {
		c.Durability = DurabilityAsync
		c.AsyncInterval = time.Hour // only the failing commits see the disk
	})
	e.create(rootCreds(), root, "before", 0o644)
	// Async acknowledges before the WAL is written: only what a sync made
	// durable is on the disk the failed server reopens for reads.
	if _, err := e.SyncMeta(ctx, &weftpb.SyncMetaRequest{}); err != nil {
		t.Fatal(err)
	}
	// Pebble aborts the process if it must rotate its WAL between the
	// failed write and the server hearing of it (diskwatch.go). The server
	// hears of it when pebble's WAL flusher writes the first full block
	// (about 50 creates here) or a sync fails; a fresh memtable takes about
	// 300 creates. So: an empty memtable, a sync after 40 creates if the
	// flusher has not yet run (a loaded machine can delay it by hundreds
	// of creates), and no creates past the tenth refusal.
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	fault.on.Store(true)
	var refused int
	var wrong error
	within(t, 20*time.Second, "creates on a full disk", func() {
		for i := range 2000 {
			_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: fmt.Sprintf("%0100d", i), Mode: 0o644, Exclusive: true})
			if i == 40 && refused == 0 && err == nil {
				_, err = e.SyncMeta(ctx, &weftpb.SyncMetaRequest{})
			}
			if err != nil {
				refused++
				if errs.KindOf(err) != errs.NoSpace && wrong == nil {
					wrong = err
				}
			}
			if refused == 10 {
				break
			}
		}
	})
	if wrong != nil {
		t.Fatalf("create on a full disk: %v, want kind NoSpace", wrong)
	}
	if refused == 0 {
		t.Fatal("2000 creates with 100-byte names succeeded on a full disk")
	}
	fault.on.Store(false)
	var mkdirErr, lookupErr error
	within(t, 10*time.Second, "mkdir after the failure", func() {
		_, mkdirErr = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "later", Mode: 0o755})
	})
	wantKind(t, mkdirErr, errs.NoSpace)
	within(t, 15*time.Second, "lookup after the failure", func() {
		_, lookupErr = e.lookup(rootCreds(), root, "before")
	})
	// Reads are served from disk, or refused if pebble is wedged; either
	// way they return.
	if lookupErr != nil {
		wantKind(t, lookupErr, errs.NoSpace)
	}
	within(t, 10*time.Second, "Close", func() { e.Server.Close() })
	e.Server = nil
}

// countingHandler counts the records logged at Error level or above.
type countingHandler struct{ errors *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// TestOpenOnFullDisk is issue 12's item 7: a meta server restarted on a full
// disk looped on pebble errors. Open must fail at once with one NoSpace
// error and a few log lines.
func TestOpenOnFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		suffix   string // the files whose writes fail
		dataOnly bool
	}{{"wal", ".log", false}, {"wal data", ".log", true}, {"every file", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e, fault, _ := faultyEnv(t, syscall.ENOSPC)
			for i := range 50 {
				e.create(rootCreds(), root, fmt.Sprint(i), 0o644)
			}
			if err := e.Server.Close(); err != nil {
				t.Fatal(err)
			}
			e.Server = nil
			fault.suffix, fault.dataOnly = tc.suffix, tc.dataOnly
			fault.on.Store(true)
			var errors atomic.Int64
			cfg := e.cfg
			cfg.Logger = slog.New(countingHandler{&errors})
			var err error
			within(t, 10*time.Second, "Open on a full disk", func() {
				var s *Server
				if s, err = Open(cfg); err == nil {
					s.Close()
				}
			})
			wantKind(t, err, errs.NoSpace)
			if n := errors.Load(); n > 5 {
				t.Errorf("Open on a full disk logged %d errors", n)
			}
			fault.on.Store(false)
			e.open() // space came back: the store is whole
			e.mustLookup(root, "49")
		})
	}
}

// TestPebbleErrorsRateLimited: a store on a failing disk made pebble log
// thousands of errors a second (issue 12, item 7); its error log is limited.
func TestPebbleErrorsRateLimited(t *testing.T) {
	var errors atomic.Int64
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := &pebbleLogger{log: slog.New(countingHandler{&errors}), limit: newLogLimiter(clock.Now)}
	for range 10000 {
		l.Errorf("background error: %v", syscall.ENOSPC)
	}
	if n := errors.Load(); n != errorBurst {
		t.Fatalf("10000 errors in one instant logged %d lines, want %d", n, errorBurst)
	}
	for range errorWindow / time.Second {
		clock.Advance()
	}
	l.Errorf("again")
	if n := errors.Load(); n != errorBurst+2 {
		t.Fatalf("after the window: %d lines, want %d (the count of suppressed ones, and the new error)", n, errorBurst+2)
	}
}
