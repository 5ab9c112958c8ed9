package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/weftbin"
)

func TestMain(m *testing.M) { weftbin.Main(m) }

// startProcs starts a local cluster and stops it when the test ends.
func startProcs(t *testing.T, opts ProcsOptions) *Procs {
	t.Helper()
	opts.Binary = weftbin.Path(t)
	p, err := StartProcs(context.Background(), opts)
	if err != nil {
		t.Fatalf("StartProcs: %v", err)
	}
	t.Cleanup(func() {
		if err := p.KillAll(); err != nil {
			t.Errorf("KillAll: %v", err)
		}
	})
	return p
}

// gone reports whether pid has exited (a zombie has).
func gone(pid int) bool {
	state, _, err := procStat(pid)
	return err != nil || state == 'Z' || state == 'X'
}

func TestProcsKillAndRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	p := startProcs(t, ProcsOptions{Dir: dir, Meta: 1, Store: 1})
	cfg := p.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := client.New(ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mkdir(ctx, "/kept", 0o755); err != nil {
		t.Fatal(err)
	}

	oldPid := p.Servers()[0].Pid
	if err := p.Kill(RoleMeta, 0); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if s := p.Servers()[0]; s.Running || !gone(oldPid) {
		t.Fatalf("meta 0 still runs after Kill: %+v", s)
	}
	if reachable(t, cfg, cfg.Meta[0].Addr) {
		t.Fatal("meta 0 answers after Kill")
	}
	if err := p.Kill(RoleMeta, 0); err == nil {
		t.Error("killing a killed server succeeded")
	}
	if err := p.Restart(ctx, RoleMeta, 0); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := p.Restart(ctx, RoleMeta, 0); !errs.Is(err, errs.Busy) {
		t.Errorf("restarting a running server: %v, want Busy", err)
	}
	s := p.Servers()[0]
	if !s.Running || s.Pid == oldPid {
		t.Fatalf("after Restart: %+v", s)
	}
	// A synced mkdir survives kill -9 (sync durability is the default).
	if _, err := c.Stat(ctx, "/kept"); err != nil {
		t.Errorf("/kept after kill -9 and restart: %v", err)
	}

	// Another process finds the restarted server in the pid file.
	q, err := OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if qs := q.Servers(); len(qs) != 2 || qs[0].Pid != s.Pid || !qs[0].Running || !qs[1].Running {
		t.Errorf("OpenProcs sees %+v", qs)
	}
	pids := []int{s.Pid, p.Servers()[1].Pid}
	if err := q.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, PidFileName)); !os.IsNotExist(err) {
		t.Errorf("pid file after Stop: %v", err)
	}
	if _, err := OpenProcs(dir); !errs.Is(err, errs.NotExist) {
		t.Errorf("OpenProcs after Stop: %v, want NotExist", err)
	}
}

func TestProcsStartFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// A binary that exits at once, as a server with a broken data
	// directory would.
	bin := filepath.Join(t.TempDir(), "false-weft")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'cannot open data' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := StartProcs(context.Background(), ProcsOptions{Binary: bin, Dir: dir, Meta: 2, Store: 1, StartTimeout: 10 * time.Second})
	if !errs.Is(err, errs.Unavailable) || !strings.Contains(err.Error(), "cannot open data") {
		t.Fatalf("StartProcs with a failing server: %v; want Unavailable with its log", err)
	}
	for _, name := range []string{ClusterFileName, PidFileName} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left after a failed first start: %v", name, err)
		}
	}
}

func TestProcsOptionsValidate(t *testing.T) {
	good := ProcsOptions{Binary: "/bin/weft", Dir: "/d", Meta: 2, Store: 2}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tt := range []struct {
		name string
		set  func(*ProcsOptions)
		want string
	}{
		{"no binary", func(o *ProcsOptions) { o.Binary = "" }, "binary"},
		{"no dir", func(o *ProcsOptions) { o.Dir = "" }, "dir"},
		{"negative meta", func(o *ProcsOptions) { o.Meta = -1 }, "meta: -1 is negative"},
		{"meta beyond the cluster limit", func(o *ProcsOptions) { o.Meta = 5000 }, "meta: 5000 is more than 4096"},
		{"meta beyond the local limit", func(o *ProcsOptions) { o.Meta = 300 }, "meta: 300 is more than 256"},
		{"store beyond the local limit", func(o *ProcsOptions) { o.Store = 1000 }, "store: 1000 is more than 256"},
		{"split threshold", func(o *ProcsOptions) { o.SplitThreshold = 1 }, "split threshold: 1 is less than 2"},
		{"replication above stores", func(o *ProcsOptions) { o.Replication = 3 }, "replication: 3 is more than the 2 store servers"},
		{"redundancy form", func(o *ProcsOptions) { o.Redundancy = "raid5" }, "want replicas:N or ec:K+M"},
		{"ec wider than the stores", func(o *ProcsOptions) { o.Redundancy = "ec:2+1" }, "ec:2+1 needs 3 distinct store servers"},
		{"ec with replication", func(o *ProcsOptions) { o.Store, o.Redundancy, o.Replication = 3, "ec:2+1", 2 }, "cannot go with replication 2"},
		{"replicas against replication", func(o *ProcsOptions) { o.Redundancy, o.Replication = "replicas:2", 1 }, "disagrees with replication 1"},
		{"durability", func(o *ProcsOptions) { o.Durability = "later" }, `durability: "later"`},
		{"backend", func(o *ProcsOptions) { o.Backend = "tape" }, `backend: "tape"`},
		{"tiny cpu", func(o *ProcsOptions) { o.MetaCPU = 0.001 }, "meta cpu: 0.001"},
		{"log level", func(o *ProcsOptions) { o.LogLevel = "loud" }, `log level: "loud"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.set(&o)
			err := o.Validate()
			if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want Invalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestProcStatOfSelf(t *testing.T) {
	state, start, err := procStat(os.Getpid())
	if err != nil || state != 'R' && state != 'S' || start == 0 {
		t.Fatalf("procStat(self) = %c, %d, %v", state, start, err)
	}
	if procAlive(os.Getpid(), start+1, "", RoleMeta) {
		t.Error("a different start time counts as the same process")
	}
}

// TestProcsFoundThroughAnotherPath: a cluster started through a symlink is
// recognised, and stopped, through the real path, and the other way round.
func TestProcsFoundThroughAnotherPath(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	p := startProcs(t, ProcsOptions{Dir: link, Backend: "mem"})
	pids := []int{p.Servers()[0].Pid, p.Servers()[1].Pid}
	q, err := OpenProcs(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range q.Servers() {
		if !s.Running {
			t.Errorf("%s %d not seen running through %s", s.Role, s.ID, real)
		}
	}
	if err := q.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
		}
	}
}

// TestPutSurvivesKill9 copies local files in with WriteFrom (weft put's code)
// through the store's same-host path and over TCP, in sync mode, kills both
// server processes with SIGKILL once the copies returned, restarts them and
// reads the files back byte for byte, both ways.
func TestPutSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	p := startProcs(t, ProcsOptions{Dir: dir, Meta: 1, Store: 1, Durability: "sync"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := ClientConfig(p.Config(), core.Root, nil)
	cc.ChunkSize = 1 << 20
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, 5<<20+12345)
	for i := range data {
		data[i] = byte(i*7) ^ byte(i>>13)
	}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	newClient := func(tcp bool) *client.Client {
		cc.NoSameHost = tcp
		c, err := client.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, tcp := range []bool{false, true} {
		c := newClient(tcp)
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.WriteFrom(ctx, fmt.Sprintf("/put-tcp-%v", tcp), f, 0o644, nil)
		f.Close()
		if err != nil {
			t.Fatalf("WriteFrom (TCP %v): %v", tcp, err)
		}
	}
	for _, role := range []Role{RoleStore, RoleMeta} {
		if err := p.Kill(role, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range []Role{RoleMeta, RoleStore} {
		if err := p.Restart(ctx, role, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tcp := range []bool{false, true} {
		c := newClient(tcp)
		for _, name := range []string{"/put-tcp-false", "/put-tcp-true"} {
			out := filepath.Join(t.TempDir(), "out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.ReadTo(ctx, name, f, nil)
			f.Close()
			got, _ := os.ReadFile(out)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s read back (TCP %v) after kill -9: %d bytes, equal %v, %v", name, tcp, len(got), bytes.Equal(got, data), err)
			}
		}
	}
}
