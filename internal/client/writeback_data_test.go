package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
)

// startCountedCluster starts a one-process cluster whose clients connect
// over loopback TCP (write-back needs a connection for its recalls) and
// returns it with a function counting the requests of a meta method.
func startCountedCluster(t *testing.T) (*cluster.Embedded, func(method string) float64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { emb.Close() })
	return emb, func(method string) float64 { return countRequests(t, emb.Registry(), method) }
}

// countRequests sums weft_meta_rpc_requests_total of method over its statuses.
func countRequests(t *testing.T, reg *prometheus.Registry, method string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "weft_meta_rpc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// wbContent is the content the tests write to file i.
func wbContent(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "file %d\n", i), 1+i%40)
}

// writeFiles creates, writes and closes n small files in dir, as tar and
// PostMark do, and chowns and stamps every other one while it is open.
func writeFiles(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		f, err := c.CreateAt(ctx, dir, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if _, err := f.Write(wbContent(i)); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		if i%2 == 0 {
			ref := client.Ref{Ino: f.Ino(), Parent: dir, Name: name}
			mtime := wbMtime(i)
			uid, gid, mode := uint32(1000+i), uint32(100), uint32(0o644)
			for _, s := range []client.SetAttr{{Mtime: &mtime}, {UID: &uid, GID: &gid}, {Mode: &mode}} {
				if _, err := c.SetAttr(ctx, ref, s); err != nil {
					t.Fatalf("setattr %s: %v", name, err)
				}
			}
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
	}
}

func wbMtime(i int) time.Time { return time.Unix(1_700_000_000+int64(i), 0) }

// checkFiles checks that c sees the content and attributes writeFiles made.
func checkFiles(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		a, err := c.LookupAt(ctx, dir, name)
		if err != nil {
			t.Errorf("lookup %s: %v", name, err)
			continue
		}
		want := wbContent(i)
		if a.Size != uint64(len(want)) {
			t.Errorf("%s: size %d, want %d", name, a.Size, len(want))
		}
		if i%2 == 0 && (a.UID != uint32(1000+i) || a.GID != 100 || a.Mode&core.ModeBits != 0o644 || !a.Mtime.Equal(wbMtime(i))) {
			t.Errorf("%s: uid %d gid %d mode %#o mtime %v, want %d 100 0644 %v", name, a.UID, a.GID, a.Mode&core.ModeBits, a.Mtime, 1000+i, wbMtime(i))
		}
		f, err := c.OpenRef(ctx, client.Ref{Ino: a.Ino, Parent: dir, Name: name}, os.O_RDONLY)
		if err != nil {
			t.Errorf("open %s: %v", name, err)
			continue
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: read %q (%v), want %q", name, got, err, want)
		}
	}
}

// Small files created, written, chowned, stamped and closed under
// write-back cost no create, commit or setattr request: their changes go
// in O(n/batch) apply_batch requests. The writer stats, opens and reads
// its files while their content is queued, without a request, and
// another client reads them after the recall.
func TestWriteBackInlineContentBatched(t *testing.T) {
	emb, count := startCountedCluster(t)
	ctx := context.Background()
	a := newClientOf(t, emb.Config(), true)
	b := newClientOf(t, emb.Config(), false)
	b.OnRecall(func([]client.LeaseKey) {})
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	before := map[string]float64{}
	for _, m := range []string{"create", "commit", "setattr", "apply_batch", "open"} {
		before[m] = count(m)
	}
	writeFiles(t, ctx, a, d.Ino, n)
	// Stats, opens and reads of files whose content is queued.
	checkFiles(t, ctx, a, d.Ino, n)
	for _, m := range []string{"apply_batch", "open"} {
		if got := count(m) - before[m]; got != 0 {
			t.Errorf("%v %s requests before any sync: the writer's reads of its queued files sent them", got, m)
		}
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"create", "commit", "setattr"} {
		if got := count(m) - before[m]; got != 0 {
			t.Errorf("%v %s requests for %d written-back files, want 0", got, m, n)
		}
	}
	// The server counts a request once it answered it.
	waitfor.Until(t, 10*time.Second, "the batches counted", func() bool { return count("apply_batch") > before["apply_batch"] })
	if got := count("apply_batch") - before["apply_batch"]; got > 2 {
		t.Errorf("%v apply_batch requests for %d files, want 1 or 2 (one batch holds 1024 ops)", got, n)
	}
	checkFiles(t, ctx, a, d.Ino, n)
	// With a change queued again, an open of a file with nothing queued
	// goes to the server without the queue (PostMark's reads and appends).
	g, err := a.CreateAt(ctx, d.Ino, "g", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	batches := count("apply_batch")
	checkFiles(t, ctx, a, d.Ino, 3)
	if got := count("apply_batch") - batches; got != 0 {
		t.Errorf("opens of files with nothing queued sent the queue (%v batches)", got)
	}
	if l := b.ReadLease(ctx, b.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	checkFiles(t, ctx, b, d.Ino, n)
	if _, err := b.LookupAt(ctx, d.Ino, "g"); err != nil {
		t.Errorf("the recall did not send the queued create: %v", err)
	}
}

// The writer reads its files back while their content is only queued, and
// another client reads them after its read lease recalled the writer's
// write lease (no sync by the writer).
func TestWriteBackInlineContentCoherent(t *testing.T) {
	emb, _ := startCountedCluster(t)
	ctx := context.Background()
	a := newClientOf(t, emb.Config(), true)
	plain := newClientOf(t, emb.Config(), false)
	b := newClientOf(t, emb.Config(), false)
	b.OnRecall(func([]client.LeaseKey) {})
	d := mkdirSent(t, ctx, a, core.RootIno, "d", 0o755)
	writeFiles(t, ctx, a, d.Ino, 20)
	if _, err := plain.LookupAt(ctx, d.Ino, "f019"); !errs.Is(err, errs.NotExist) {
		t.Errorf("a client without leases sees a queued create at once (%v): nothing was written back", err)
	}
	checkFiles(t, ctx, a, d.Ino, 20)
	// More, queued after the reads sent the first ones, then read by
	// another client.
	d2 := mkdirSent(t, ctx, a, core.RootIno, "d2", 0o755)
	writeFiles(t, ctx, a, d2.Ino, 20)
	if l := b.ReadLease(ctx, b.DirLeases(d2.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	checkFiles(t, ctx, b, d2.Ino, 20)
	if err := a.SyncDir(ctx, d2.Ino); err != nil {
		t.Errorf("a batch was refused: %v", err)
	}
}

// A chown the server's rules leave to the server is not written back: a
// non-owner's chown fails with EPERM at once, as without write-back.
func TestWriteBackChownRules(t *testing.T) {
	emb, _ := startCountedCluster(t)
	ctx := context.Background()
	a := newClientOf(t, emb.Config(), true)
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	user := client.WithCreds(ctx, core.Creds{UID: 1000, GID: 1000, Groups: []uint32{1000, 2000}})
	f, err := a.CreateAt(user, d.Ino, "mine", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	at, err := a.LookupAt(ctx, d.Ino, "mine")
	if err != nil {
		t.Fatal(err)
	}
	ref := client.Ref{Ino: at.Ino, Parent: d.Ino, Name: "mine"}
	g := uint32(2000)
	if got, err := a.SetAttr(user, ref, client.SetAttr{GID: &g}); err != nil || got.GID != 2000 {
		t.Errorf("chgrp by the owner to its group: gid %d, %v", got.GID, err)
	}
	other := uint32(3000)
	if _, err := a.SetAttr(user, ref, client.SetAttr{GID: &other}); !errs.Is(err, errs.NotPermitted) {
		t.Errorf("chgrp by the owner to a group it is not in: %v, want NotPermitted", err)
	}
	if _, err := a.SetAttr(user, ref, client.SetAttr{UID: &other}); !errs.Is(err, errs.NotPermitted) {
		t.Errorf("chown by a user: %v, want NotPermitted", err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatalf("a batch was refused: %v", err)
	}
	if at, err = a.LookupAt(ctx, d.Ino, "mine"); err != nil || at.GID != 2000 || at.UID != 1000 {
		t.Errorf("after the sync: uid %d gid %d (%v), want 1000 2000", at.UID, at.GID, err)
	}
}

// A chown and a content commit written back by a client that then lost
// its lease without sending them (stopped past the lease's term while
// another client replaced the file) are refused by the server as a
// whole: the next fsync of the directory says so, and the other client's
// file keeps its owner and content.
func TestWriteBackOwnerRefusedAfterLostLease(t *testing.T) {
	emb, count := startCountedCluster(t)
	ctx := context.Background()
	a := newClientOf(t, emb.Config(), true)
	b := newClientOf(t, emb.Config(), false)
	d, err := b.MkdirAt(ctx, core.RootIno, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.CreateAt(ctx, d.Ino, "f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	at, err := a.LookupAt(ctx, d.Ino, "f")
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.OpenRef(ctx, client.Ref{Ino: at.Ino, Parent: d.Ino, Name: "f"}, os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	uid := uint32(5)
	if got, err := a.SetAttr(ctx, client.Ref{Ino: at.Ino, Parent: d.Ino, Name: "f"}, client.SetAttr{UID: &uid}); err != nil || got.UID != 5 {
		t.Fatalf("chown: uid %d, %v", got.UID, err)
	}
	if got := count("apply_batch"); got != 0 {
		t.Fatalf("%v batches sent before the stall", got)
	}
	refusedBefore := count("apply_batch")
	a.Stall(true)
	// b's unlink recalls a's lease, which a does not answer: it goes on
	// once the lease's term ran out on the server.
	if err := b.UnlinkAt(ctx, d.Ino, "f"); err != nil {
		t.Fatal(err)
	}
	f, err = b.CreateAt(ctx, d.Ino, "f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("b's")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	a.Stall(false)
	if err := a.SyncDir(ctx, d.Ino); !errs.Is(err, errs.Stale) {
		t.Errorf("fsync of the directory after the lost lease: %v, want Stale", err)
	}
	// The server counts a request once it answered it.
	waitfor.Until(t, 10*time.Second, "the refused batch counted", func() bool { return count("apply_batch") > refusedBefore })
	bt, err := b.LookupAt(ctx, d.Ino, "f")
	if err != nil || bt.UID != 0 || bt.Size != 3 {
		t.Errorf("b's file: uid %d size %d (%v), want 0 3: a's refused changes applied", bt.UID, bt.Size, err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Errorf("the refusal is reported once: %v", err)
	}
}

// A mkdir and a chmod of a subdirectory (tar's) sent to the server cost
// the later creates in the directory no lookup: the client forgets only
// the name the request was about, and still knows the others.
func TestWriteBackKeepsListingAcrossRequests(t *testing.T) {
	emb, count := startCountedCluster(t)
	ctx := context.Background()
	a := newClientOf(t, emb.Config(), true)
	d := mkdirSent(t, ctx, a, core.RootIno, "d", 0o755)
	writeFiles(t, ctx, a, d.Ino, 5)
	sub, err := a.MkdirAt(ctx, d.Ino, "sub", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o755)
	if _, err := a.SetAttr(ctx, client.Ref{Ino: sub.Ino, Parent: d.Ino, Name: "sub"}, client.SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if st, err := a.LookupAt(ctx, d.Ino, "sub"); err != nil || st.Mode&core.ModeBits != 0o755 {
		t.Fatalf("lookup of the new directory: %+v, %v", st, err)
	}
	lookups := count("lookup")
	for i := range 30 {
		f, err := a.CreateAt(ctx, d.Ino, fmt.Sprintf("g%02d", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if got := count("lookup") - lookups; got > 0 {
		t.Errorf("%v lookups for 30 creates after a mkdir and a chmod in the directory", got)
	}
	if _, err := a.CreateAt(ctx, d.Ino, "sub", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Errorf("create over the new directory: %v, want Exist", err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatalf("a batch was refused: %v", err)
	}
	checkFiles(t, ctx, a, d.Ino, 5)
}

// PostMark reads and appends to files it wrote a while ago, after their
// batches were applied: the writer opens and reads them from what its
// batches left, with no request, while it holds the directory's write
// lease; an append is written back again; once another client has written
// one of them (which recalls the lease), the writer reads that client's
// content, not its own copy.
func TestWriteBackOpensAppliedFiles(t *testing.T) {
	const n = 20
	ctx := context.Background()
	a, b, d, count := appliedFiles(t, ctx, n)
	opens := count("open")
	checkFiles(t, ctx, a, d.Ino, n)
	if got := count("open") - opens; got != 0 {
		t.Errorf("%v open requests to read %d files whose batches the writer sent", got, n)
	}

	// An append, written back and applied, then read without a request.
	at, err := a.LookupAt(ctx, d.Ino, "f001")
	if err != nil {
		t.Fatal(err)
	}
	ref := client.Ref{Ino: at.Ino, Parent: d.Ino, Name: "f001"}
	f, err := a.OpenRef(ctx, ref, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("appended\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	want := append(wbContent(1), "appended\n"...)
	opens = count("open")
	if got := readRef(t, ctx, a, ref); !bytes.Equal(got, want) {
		t.Errorf("after the append: read %q, want %q", got, want)
	}
	if got := count("open") - opens; got != 0 {
		t.Errorf("%v open requests to read a file whose append the writer sent", got)
	}

	// Another client rewrites f002; the writer then reads that content.
	bt, err := b.LookupAt(ctx, d.Ino, "f002")
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.OpenRef(ctx, client.Ref{Ino: bt.Ino, Parent: d.Ino, Name: "f002"}, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("from b\n")); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readRef(t, ctx, a, client.Ref{Ino: bt.Ino, Parent: d.Ino, Name: "f002"}); string(got) != "from b\n" {
		t.Errorf("the writer read %q after another client rewrote the file, want %q", got, "from b\n")
	}
}

// readRef reads the whole file ref names through c.
func readRef(t *testing.T, ctx context.Context, c *client.Client, ref client.Ref) []byte {
	t.Helper()
	f, err := c.OpenRef(ctx, ref, os.O_RDONLY)
	if err != nil {
		t.Fatalf("open %s: %v", ref.Name, err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", ref.Name, err)
	}
	return got
}

// Stats of files the writer's batches left on the servers need no request
// while it holds the directory's write lease; after another client changed
// one, the writer sees the change.
func TestWriteBackStatsAppliedFiles(t *testing.T) {
	const n = 20
	ctx := context.Background()
	a, b, d, count := appliedFiles(t, ctx, n)
	refs := make([]client.Ref, n)
	for i := range refs {
		name := fmt.Sprintf("f%03d", i)
		at, err := a.LookupAt(ctx, d.Ino, name)
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = client.Ref{Ino: at.Ino, Parent: d.Ino, Name: name}
	}
	getattrs := count("getattr")
	for i, ref := range refs {
		at, err := a.GetAttr(ctx, ref)
		if err != nil || at.Size != uint64(len(wbContent(i))) {
			t.Errorf("stat %s: size %d (%v), want %d", ref.Name, at.Size, err, len(wbContent(i)))
		}
	}
	if got := count("getattr") - getattrs; got != 0 {
		t.Errorf("%v getattr requests to stat %d files whose batches the writer sent", got, n)
	}
	mode := uint32(0o600)
	if _, err := b.SetAttr(ctx, refs[3], client.SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if at, err := a.GetAttr(ctx, refs[3]); err != nil || at.Mode&core.ModeBits != 0o600 {
		t.Errorf("after another client's chmod the writer sees mode %#o (%v), want 0600", at.Mode&core.ModeBits, err)
	}
}

// appliedFiles starts a cluster with a write-back client a, which writes n
// files in a new directory d and syncs them, and a client b with leases;
// count counts the requests of a meta method.
func appliedFiles(t *testing.T, ctx context.Context, n int) (a, b *client.Client, d core.Attr, count func(string) float64) {
	t.Helper()
	emb, count := startCountedCluster(t)
	a = newClientOf(t, emb.Config(), true)
	b = newClientOf(t, emb.Config(), false)
	b.OnRecall(func([]client.LeaseKey) {})
	d = mkdirSent(t, ctx, a, core.RootIno, "d", 0o755)
	writeFiles(t, ctx, a, d.Ino, n)
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	return a, b, d, count
}
