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
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
)

// newCreateAtCloseClient is a client of cfg whose new files' creates wait
// for their close (Config.CreateAtClose).
func newCreateAtCloseClient(t *testing.T, cfg *config.Cluster) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.CreateAtClose = true
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// countAllRequests sums weft_meta_rpc_requests_total over every method.
func countAllRequests(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "weft_meta_rpc_requests_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// createFile creates name in dir with O_CREAT|O_EXCL, writes data and
// closes it, as lat_fs does.
func createFile(ctx context.Context, c *client.Client, dir core.Ino, name string, data []byte) error {
	f, err := c.CreateAt(ctx, dir, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readFile is the whole content of name in dir, as c reads it.
func readFile(ctx context.Context, c *client.Client, dir core.Ino, name string) ([]byte, error) {
	a, err := c.LookupAt(ctx, dir, name)
	if err != nil {
		return nil, err
	}
	f, err := c.OpenRef(ctx, client.Ref{Ino: a.Ino, Parent: dir, Name: name}, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// A small file's create, write and close cost one meta request under
// CreateAtClose (lat_fs's create): the create goes with its content in one
// apply_batch, sent at the close. Without it they cost a create and a
// commit.
func TestCreateAtCloseOneRequest(t *testing.T) {
	emb, count := startCountedCluster(t)
	ctx := context.Background()
	a := newCreateAtCloseClient(t, emb.Config())
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("16 KiB of lat_fs "), 16<<10/17)
	// The first create takes the lease, the listing and inode numbers.
	if err := createFile(ctx, a, d.Ino, "warm", data); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "warm's batch counted", func() bool { return count("apply_batch") >= 1 })
	const n = 40
	before := countAllRequests(t, emb.Registry())
	creates, commits := count("create"), count("commit")
	for i := range n {
		if err := createFile(ctx, a, d.Ino, fmt.Sprintf("f%02d", i), data); err != nil {
			t.Fatal(err)
		}
	}
	// The server counts a request after its reply.
	waitfor.Until(t, 10*time.Second, "the requests counted", func() bool {
		return countAllRequests(t, emb.Registry())-before >= n
	})
	// A few lease renewals may fall in the loop.
	if got := countAllRequests(t, emb.Registry()) - before; got > n+4 {
		t.Errorf("%v meta requests for %d creates of 16 KiB, want at most %d (one each, and renewals)", got, n, n+4)
	}
	if got := count("create") - creates + count("commit") - commits; got != 0 {
		t.Errorf("%v create and commit requests, want none (the content goes with the create)", got)
	}
	b := newClientOf(t, emb.Config(), false)
	for i := range n {
		got, err := readFile(ctx, b, d.Ino, fmt.Sprintf("f%02d", i))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("f%02d from another client: %d bytes (%v), want %d", i, len(got), err, len(data))
		}
	}
}

// O_EXCL's EEXIST is reported at the open, for a name another client
// created and for one whose create still waits for its close; another
// client sees a file whose create waits (its read lease on the directory,
// as a mount takes, recalls the write lease, which sends the create) and
// reads its content, and a chmod made meanwhile, after the close.
func TestCreateAtCloseExclusiveAndVisible(t *testing.T) {
	emb, _ := startCountedCluster(t)
	ctx := context.Background()
	a := newCreateAtCloseClient(t, emb.Config())
	b := newClientOf(t, emb.Config(), false)
	b.OnRecall(func([]client.LeaseKey) {})
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := createFile(ctx, b, d.Ino, "taken", []byte("b's")); err != nil {
		t.Fatal(err)
	}
	if err := createFile(ctx, a, d.Ino, "taken", []byte("a's")); !errs.Is(err, errs.Exist) {
		t.Fatalf("O_EXCL create of a name another client made: %v, want EEXIST", err)
	}
	f, err := a.CreateAt(ctx, d.Ino, "open", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := a.CreateAt(ctx, d.Ino, "open", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Fatalf("O_EXCL create of a name whose create waits: %v, want EEXIST", err)
	}
	if _, err := f.Write([]byte("written before the close")); err != nil {
		t.Fatal(err)
	}
	if l := b.ReadLease(ctx, b.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	if _, err := b.LookupAt(ctx, d.Ino, "open"); err != nil {
		t.Fatalf("another client's lookup of a file whose create waits for its close: %v", err)
	}
	mode := uint32(0o600) // a change that goes to the servers at once
	if _, err := a.SetAttr(ctx, client.Ref{Ino: f.Ino(), Parent: d.Ino, Name: "open"}, client.SetAttr{Mode: &mode}); err != nil {
		t.Fatalf("chmod of a file whose create waits: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := readFile(ctx, b, d.Ino, "open"); err != nil || string(got) != "written before the close" {
		t.Fatalf("another client reads %q (%v)", got, err)
	}
	if at, err := b.LookupAt(ctx, d.Ino, "open"); err != nil || at.Mode&core.ModeBits != mode {
		t.Fatalf("another client sees mode %#o (%v), want %#o", at.Mode&core.ModeBits, err, mode)
	}
	if got, err := readFile(ctx, b, d.Ino, "taken"); err != nil || string(got) != "b's" {
		t.Fatalf("the file the refused create named holds %q (%v), want b's", got, err)
	}
}

// What close acknowledged is on the servers: a crash of the client right
// after (its queue dropped unsent) loses none of it, a file opened
// read-only by its create included. An unlink is sent at once, as without
// write-back.
func TestCreateAtCloseDurableAtClose(t *testing.T) {
	emb, _ := startCountedCluster(t)
	ctx := context.Background()
	a := newCreateAtCloseClient(t, emb.Config())
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := createFile(ctx, a, d.Ino, fmt.Sprintf("f%d", i), wbContent(i)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := a.CreateAt(ctx, d.Ino, "empty", os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	a.DropWriteBack() // the client crashes
	b := newClientOf(t, emb.Config(), false)
	for i := range 4 {
		got, err := readFile(ctx, b, d.Ino, fmt.Sprintf("f%d", i))
		if err != nil || !bytes.Equal(got, wbContent(i)) {
			t.Errorf("f%d after the writer's crash: %q (%v), want %q", i, got, err, wbContent(i))
		}
	}
	if got, err := readFile(ctx, b, d.Ino, "empty"); err != nil || len(got) != 0 {
		t.Errorf("empty after the writer's crash: %q (%v)", got, err)
	}

	u := newCreateAtCloseClient(t, emb.Config())
	if err := createFile(ctx, u, d.Ino, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := u.UnlinkAt(ctx, d.Ino, "gone"); err != nil {
		t.Fatal(err)
	}
	u.DropWriteBack()
	if _, err := b.LookupAt(ctx, d.Ino, "gone"); !errs.Is(err, errs.NotExist) {
		t.Errorf("a file unlinked before the crash: %v, want ENOENT", err)
	}
}

// Under CreateAtClose the close of a file the client did not just create
// commits as without write-back: it takes no write lease on the directory
// (which would recall the other clients' read leases for nothing).
func TestCreateAtCloseCommitTakesNoLease(t *testing.T) {
	emb, _ := startCountedCluster(t)
	ctx := context.Background()
	a := newCreateAtCloseClient(t, emb.Config())
	b := newClientOf(t, emb.Config(), false)
	d, err := b.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := createFile(ctx, b, d.Ino, "old", []byte("b's")); err != nil {
		t.Fatal(err)
	}
	at, err := a.LookupAt(ctx, d.Ino, "old")
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.OpenRef(ctx, client.Ref{Ino: at.Ino, Parent: d.Ino, Name: "old"}, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("a's")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if a.WriteBackHeld(d.Ino) {
		t.Error("the close of an old file took a write lease on its directory")
	}
	if got, err := readFile(ctx, b, d.Ino, "old"); err != nil || string(got) != "a's" {
		t.Errorf("another client reads %q (%v), want a's", got, err)
	}
}

// A mount's RELEASE of a file comes after its FLUSH, possibly after the
// next file's CREATE: the release must not send the next file's create
// before its content, whose commit would then go on its own (and make the
// client forget the directory's attributes).
func TestCreateAtCloseReleaseAfterNextCreate(t *testing.T) {
	emb, count := startCountedCluster(t)
	ctx := context.Background()
	a := newCreateAtCloseClient(t, emb.Config())
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := createFile(ctx, a, d.Ino, "warm", []byte("w")); err != nil {
		t.Fatal(err)
	}
	// The server counts a request after its reply.
	waitfor.Until(t, 10*time.Second, "warm's batch counted", func() bool { return count("apply_batch") >= 1 })
	batches, commits := count("apply_batch"), count("commit")
	first, err := a.CreateAt(ctx, d.Ino, "first", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Write([]byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := first.Flush(); err != nil { // FLUSH
		t.Fatal(err)
	}
	second, err := a.CreateAt(ctx, d.Ino, "second", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil { // RELEASE
		t.Fatal(err)
	}
	if _, err := second.Write([]byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the batches counted", func() bool { return count("apply_batch")-batches >= 2 })
	if got := count("commit") - commits; got != 0 {
		t.Errorf("%v commit requests, want none (each content goes with its create)", got)
	}
	if got := count("apply_batch") - batches; got != 2 {
		t.Errorf("%v apply_batch requests for two files, want 2", got)
	}
}
