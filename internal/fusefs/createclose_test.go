package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/waitfor"
)

// metaRequests counts weft_meta_rpc_requests_total by method.
func metaRequests(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "weft_meta_rpc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// requestsSince is how many meta requests were counted since before, in
// all and by method.
func requestsSince(t *testing.T, reg *prometheus.Registry, before map[string]float64) (float64, map[string]float64) {
	t.Helper()
	sum, by := 0.0, map[string]float64{}
	for k, v := range metaRequests(t, reg) {
		if d := v - before[k]; d != 0 {
			by[k] = d
			sum += d
		}
	}
	return sum, by
}

// Through a mount whose client holds creates until the close
// (client.Config.CreateAtClose), a small file's open(O_CREAT|O_EXCL),
// write and close cost one meta request, the kernel's lookup of the new
// name included: the directory's write lease answers it. EEXIST is
// reported at the open, and another client reads the files.
func TestCreateAtCloseMount(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t, func(cc *client.Config) { cc.CreateAtClose = true })
	m := mount(t, c, Options{})
	dir := filepath.Join(m.dir, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("lat_fs "), 3000/7) // inline (the tests' limit is 4 KiB)
	create := func(name string) error {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	// The first create takes the lease, the listing and inode numbers.
	if err := create("warm"); err != nil {
		t.Fatal(err)
	}
	const n = 40
	reg := tc.emb.Registry()
	before := metaRequests(t, reg)
	for i := range n {
		if err := create(fmt.Sprintf("f%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The server counts a request after its reply.
	waitfor.Until(t, 10*time.Second, "the requests counted", func() bool {
		got, _ := requestsSince(t, reg, before)
		return got >= n
	})
	// A few lease renewals may fall in the loop.
	if got, by := requestsSince(t, reg, before); got > n+4 {
		t.Errorf("%v meta requests for %d creates through the mount (%v), want at most %d (one each, and renewals)", got, n, by, n+4)
	}
	if err := create("f00"); !os.IsExist(err) {
		t.Errorf("O_EXCL create of an existing name: %v, want EEXIST", err)
	}
	other := tc.client(t)
	d, err := other.LookupAt(t.Context(), core.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("f%02d", i)
		a, err := other.LookupAt(t.Context(), d.Ino, name)
		if err != nil {
			t.Fatalf("%s from another client: %v", name, err)
		}
		f, err := other.OpenRef(t.Context(), client.Ref{Ino: a.Ino, Parent: d.Ino, Name: name}, os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data)+1)
		k, _ := f.ReadAt(got, 0)
		f.Close()
		if !bytes.Equal(got[:k], data) {
			t.Fatalf("%s from another client: %d bytes, want %d", name, k, len(data))
		}
	}
}

// weft mount --durability create-at-close: what a close returned is on
// the servers, so a kill -9 of the mount right after loses none of it,
// and O_EXCL's EEXIST comes at the open.
func TestCreateAtCloseMountKilled(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	mnt := newMountPoint(t)
	pid := mountDurability(t, tc.emb.ClusterFile(), mnt, "create-at-close")
	dir := filepath.Join(mnt, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 100+i) }
	const n = 20
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), content(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "f00"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err == nil {
		f.Close()
	}
	if !os.IsExist(err) {
		t.Errorf("O_EXCL create of an existing name through the mount: %v, want EEXIST", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if Mounted(mnt) {
		_ = Unmount(mnt)
	}
	c := tc.client(t)
	ctx := t.Context()
	d, err := c.LookupAt(ctx, core.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("f%02d", i)
		a, err := c.LookupAt(ctx, d.Ino, name)
		if err != nil {
			t.Errorf("%s after the mount's kill -9: %v", name, err)
			continue
		}
		f, err := c.OpenRef(ctx, client.Ref{Ino: a.Ino, Parent: d.Ino, Name: name}, os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(content(i))+1)
		k, _ := f.ReadAt(got, 0)
		f.Close()
		if !bytes.Equal(got[:k], content(i)) {
			t.Errorf("%s after the mount's kill -9: %q, want %q", name, got[:k], content(i))
		}
	}
}
