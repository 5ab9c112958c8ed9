package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/weftbin"
)

// replicaFiles writes n files of up to a few chunks each, past the inline
// limit, and returns their content by path.
func replicaFiles(t *testing.T, ctx context.Context, c *client.Client, n int) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte, n)
	for i := range n {
		data := make([]byte, 200<<10+i*(700<<10)+i)
		for j := range data {
			data[j] = byte(j*31+i) ^ byte(j>>11)
		}
		name := fmt.Sprintf("/f%03d", i)
		if _, err := c.WriteFrom(ctx, name, bytes.NewReader(data), 0o644, nil); err != nil {
			t.Fatalf("WriteFrom %s: %v", name, err)
		}
		files[name] = data
	}
	return files
}

// newTestClient is a client of p's cluster, closed when
// the test ends; tcp keeps it off the same-host path.
func newTestClient(t *testing.T, p *Procs, tcp bool, edit func(*client.Config)) *client.Client {
	t.Helper()
	cc := ClientConfig(p.Config(), core.Root, nil)
	cc.NoSameHost = tcp
	if edit != nil {
		edit(&cc)
	}
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll reads path three ways: ReadTo into a local file, ReadTo into a
// pipe (the read-ahead path) and ReadAt in small pieces (chunk reads).
func readAll(ctx context.Context, c *client.Client, path string, size int) (map[string][]byte, error) {
	out := make(map[string][]byte)
	dir, err := os.MkdirTemp("", "weft-read-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		return nil, err
	}
	_, err = c.ReadTo(ctx, path, f, nil)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("ReadTo file: %w", err)
	}
	if out["readto-file"], err = os.ReadFile(f.Name()); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := c.ReadTo(ctx, path, struct{ io.Writer }{&buf}, nil); err != nil {
		return nil, fmt.Errorf("ReadTo stream: %w", err)
	}
	out["readto-stream"] = buf.Bytes()
	h, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	got := make([]byte, size)
	// Backwards, so no two reads follow each other (no read-ahead).
	const piece = 100 << 10
	for off := (size - 1) / piece * piece; off >= 0; off -= piece {
		end := min(off+piece, size)
		if _, err := h.ReadAtContext(ctx, got[off:end], int64(off)); err != nil && err != io.EOF {
			return nil, fmt.Errorf("ReadAt %d: %w", off, err)
		}
	}
	out["readat"] = got
	return out, nil
}

// TestReplicaLostReadsFromTheOther is issue 12 item 1a: with R=2, a store
// whose chunk directory is lost restarts empty; every file must still read
// back identical from the other replica, never as zeros.
func TestReplicaLostReadsFromTheOther(t *testing.T) {
	dir := t.TempDir()
	p := startProcs(t, ProcsOptions{Dir: dir, Meta: 1, Store: 3, Replication: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	files := replicaFiles(t, ctx, newTestClient(t, p, false, nil), 12)

	lost := 1
	if err := p.Kill(RoleStore, lost); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(p.Config().Store[lost].Dir, "chunks")); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, RoleStore, lost); err != nil {
		t.Fatal(err)
	}
	for _, tcp := range []bool{false, true} {
		c := newTestClient(t, p, tcp, nil)
		for name, want := range files {
			got, err := readAll(ctx, c, name, len(want))
			if err != nil {
				t.Errorf("%s (TCP %v): %v", name, tcp, err)
				continue
			}
			for how, b := range got {
				if !bytes.Equal(b, want) {
					t.Errorf("%s (TCP %v) by %s: %d bytes differ from the %d written", name, tcp, how, len(b), len(want))
				}
			}
		}
	}
	// weft get, as an operator runs it.
	for name, want := range files {
		local := filepath.Join(t.TempDir(), "got")
		cmd := exec.CommandContext(ctx, weftbin.Path(t), "--cluster", p.ClusterFile(), "get", name, local)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("weft get %s: %v\n%s", name, err, out)
			continue
		}
		if got, _ := os.ReadFile(local); !bytes.Equal(got, want) {
			t.Errorf("weft get %s: %d bytes differ from the %d written", name, len(got), len(want))
		}
	}
}

// stopStore stops store id with SIGSTOP until the test ends.
func stopStore(t *testing.T, p *Procs, id int) {
	t.Helper()
	for _, s := range p.Servers() {
		if s.Role == RoleStore && s.ID == id {
			if err := syscall.Kill(s.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(s.Pid, syscall.SIGCONT) })
			return
		}
	}
	t.Fatalf("no store %d", id)
}

// TestStoppedReplicaReadsFromTheOther is issue 12 item 2a: with R=2, a
// store stopped by SIGSTOP must not hang the reads whose first replica it
// is: each is answered by the other replica within about ReplicaTimeout.
func TestStoppedReplicaReadsFromTheOther(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 3, Replication: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	files := replicaFiles(t, ctx, newTestClient(t, p, false, nil), 6)
	stopStore(t, p, 0)

	const bound = client.DefaultReplicaTimeout + 4*time.Second // slack for a loaded machine
	for _, tcp := range []bool{false, true} {
		c := newTestClient(t, p, tcp, nil)
		for name, want := range files {
			rctx, rcancel := context.WithTimeout(ctx, 3*bound)
			start := time.Now()
			got, err := readAll(rctx, c, name, len(want))
			took := time.Since(start)
			rcancel()
			if err != nil {
				t.Errorf("%s (TCP %v) with a stopped replica: %v after %v", name, tcp, err, took)
				continue
			}
			t.Logf("%s (TCP %v, %d bytes): read three ways in %v with store 0 stopped", name, tcp, len(want), took)
			// readAll reads the file three ways, after an open.
			if took > 3*bound {
				t.Errorf("%s (TCP %v): three reads took %v, want each within %v", name, tcp, took, bound)
			}
			for how, b := range got {
				if !bytes.Equal(b, want) {
					t.Errorf("%s (TCP %v) by %s: %d bytes differ from the %d written", name, tcp, how, len(b), len(want))
				}
			}
		}
	}
}

// TestStoppedStoreFailsWithinBound: with R=1 and the only store stopped, a
// read and a put fail with an error within StoreTimeout, never hang.
func TestStoppedStoreFailsWithinBound(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const storeTimeout = 3 * time.Second
	const bound = storeTimeout + 4*time.Second
	setTimeout := func(cc *client.Config) { cc.StoreTimeout = storeTimeout }
	files := replicaFiles(t, ctx, newTestClient(t, p, false, setTimeout), 2)
	stopStore(t, p, 0)
	for _, tcp := range []bool{false, true} {
		c := newTestClient(t, p, tcp, setTimeout)
		for name, want := range files {
			rctx, rcancel := context.WithTimeout(ctx, 4*bound)
			start := time.Now()
			_, err := readAll(rctx, c, name, len(want))
			took := time.Since(start)
			rcancel()
			if err == nil || took > bound {
				t.Errorf("read %s (TCP %v) from a stopped store: %v after %v, want an error within %v", name, tcp, err, took, bound)
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 4*bound)
		start := time.Now()
		_, err := c.WriteFrom(rctx, fmt.Sprintf("/put-%v", tcp), bytes.NewReader(make([]byte, 5<<20)), 0o644, nil)
		took := time.Since(start)
		rcancel()
		if err == nil || took > bound {
			t.Errorf("put (TCP %v) to a stopped store: %v after %v, want an error within %v", tcp, err, took, bound)
		}
	}
}

// TestLostOnlyReplicaFailsRead: with R=1, a store that lost its chunk
// directory, or its whole directory (so that it cannot know it lost
// anything), holds the only replica: every read fails (EIO), never zeros,
// and weft get exits non-zero.
func TestLostOnlyReplicaFailsRead(t *testing.T) {
	for _, lost := range []string{"chunks", ""} {
		t.Run("lost="+lost, func(t *testing.T) { testLostOnlyReplica(t, lost) })
	}
}

func testLostOnlyReplica(t *testing.T, lost string) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	files := replicaFiles(t, ctx, newTestClient(t, p, false, nil), 3)
	if err := p.Kill(RoleStore, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(p.Config().Store[0].Dir, lost)); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, RoleStore, 0); err != nil {
		t.Fatal(err)
	}
	for _, tcp := range []bool{false, true} {
		c := newTestClient(t, p, tcp, nil)
		for name, want := range files {
			if _, err := readAll(ctx, c, name, len(want)); !errs.Is(err, errs.IO) && !errs.Is(err, errs.Lost) {
				t.Errorf("%s (TCP %v) with its only replica lost: %v, want EIO", name, tcp, err)
			}
		}
	}
	for name := range files {
		local := filepath.Join(t.TempDir(), "got")
		cmd := exec.CommandContext(ctx, weftbin.Path(t), "--cluster", p.ClusterFile(), "get", name, local)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("weft get %s of lost data exited 0:\n%s", name, out)
		}
	}
}
