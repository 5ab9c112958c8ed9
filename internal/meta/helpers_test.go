package meta

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

var ctx = context.Background()

const root = uint64(core.RootIno)

// fakeClock is a clock tests move by hand, so time updates are observable.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance() {
	c.mu.Lock()
	c.now = c.now.Add(time.Second)
	c.mu.Unlock()
}

type env struct {
	t     testing.TB
	dir   string
	clock *fakeClock
	cfg   Config
	*Server
}

// newEnv opens a sync-mode server in a temporary directory, closed at the end
// of the test.
func newEnv(t testing.TB, mod ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}}
	e.cfg = Config{Dir: e.dir, Durability: DurabilitySync, Now: e.clock.Now, Registry: prometheus.NewRegistry(), LeaseGrace: -1}
	for _, m := range mod {
		m(&e.cfg)
	}
	e.open()
	t.Cleanup(func() {
		if e.Server != nil {
			e.Server.Close()
		}
	})
	return e
}

func (e *env) open() {
	e.t.Helper()
	cfg := e.cfg
	cfg.Registry = prometheus.NewRegistry()
	s, err := Open(cfg)
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.Server = s
}

// reopen closes and reopens the server on the same store.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.Server.Close(); err != nil {
		e.t.Fatalf("close: %v", err)
	}
	e.open()
}

func rootCreds() *weftpb.Creds { return &weftpb.Creds{} }

func user(uid, gid uint32, groups ...uint32) *weftpb.Creds {
	return &weftpb.Creds{Uid: uid, Gid: gid, Groups: groups}
}

var (
	alice = user(1000, 1000)
	bob   = user(1001, 1001)
)

func wantKind(t testing.TB, err error, k errs.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want %v", k)
	}
	if errs.KindOf(err) != k {
		t.Fatalf("got %v (kind %v), want kind %v", err, errs.KindOf(err), k)
	}
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func (e *env) create(c *weftpb.Creds, parent uint64, name string, mode uint32) *weftpb.Attr {
	e.t.Helper()
	r, err := e.Create(ctx, &weftpb.CreateRequest{Creds: c, Parent: parent, Name: name, Mode: mode, Exclusive: true})
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	return r.Attr
}

func (e *env) mkdir(c *weftpb.Creds, parent uint64, name string, mode uint32) *weftpb.Attr {
	e.t.Helper()
	r, err := e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: c, Parent: parent, Name: name, Mode: mode})
	if err != nil {
		e.t.Fatalf("mkdir %s: %v", name, err)
	}
	return r.Attr
}

func (e *env) lookup(c *weftpb.Creds, parent uint64, name string) (*weftpb.Attr, error) {
	r, err := e.Lookup(ctx, &weftpb.LookupRequest{Creds: c, Parent: parent, Name: name})
	if err != nil {
		return nil, err
	}
	return r.Attr, nil
}

func (e *env) mustLookup(parent uint64, name string) *weftpb.Attr {
	e.t.Helper()
	a, err := e.lookup(rootCreds(), parent, name)
	if err != nil {
		e.t.Fatalf("lookup %s: %v", name, err)
	}
	return a
}

func (e *env) getattr(ino uint64) *weftpb.Attr {
	e.t.Helper()
	r, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: rootCreds(), Node: &weftpb.NodeRef{Ino: ino}})
	if err != nil {
		e.t.Fatalf("getattr %d: %v", ino, err)
	}
	return r.Attr
}

func (e *env) chmod(c *weftpb.Creds, node *weftpb.NodeRef, mode uint32) error {
	_, err := e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: c, Node: node, Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE), Mode: mode})
	return err
}

// names lists a directory completely, as root.
func (e *env) names(dir uint64) []string {
	e.t.Helper()
	var out []string
	var cookie []byte
	for {
		r, err := e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: dir, Cookie: cookie, Limit: 100})
		if err != nil {
			e.t.Fatalf("readdir: %v", err)
		}
		for _, de := range r.Entries {
			out = append(out, de.Name)
		}
		if r.Eof {
			return out
		}
		cookie = r.Cookie
	}
}

// fileRef names a one-link file by its entry.
func fileRef(parent uint64, name string, ino uint64) *weftpb.NodeRef {
	return &weftpb.NodeRef{Parent: parent, Name: name, Ino: ino}
}

func inoRef(ino uint64) *weftpb.NodeRef { return &weftpb.NodeRef{Ino: ino} }

// hasInodeRecord reports whether ino has a standalone record on disk.
func (e *env) hasInodeRecord(ino uint64) bool {
	e.t.Helper()
	_, found, err := getValue(e.db, inodeKey(core.Ino(ino)))
	if err != nil {
		e.t.Fatal(err)
	}
	return found
}

// entryRecord reads an entry straight from the store.
func (e *env) entryRecord(parent uint64, name string) *weftpb.EntryRecord {
	e.t.Helper()
	rec := &weftpb.EntryRecord{}
	found, err := getRecord(e.db, entryKey(core.Ino(parent), 0, name), rec)
	if err != nil || !found {
		e.t.Fatalf("entry %d/%s: found=%v err=%v", parent, name, found, err)
	}
	return rec
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
