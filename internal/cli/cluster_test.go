package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/weftbin"
)

func TestMain(m *testing.M) { weftbin.Main(m) }

// stopClusterAtCleanup kills whatever cluster runs in dir when the test
// ends, however it ends. Register it before starting.
func stopClusterAtCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := run(ctx, "cluster", "stop", "--dir", dir, "--kill"); err != nil {
			t.Errorf("cleanup: cluster stop: %v", err)
		}
	})
}

// startCluster runs weft cluster start in this process, with the built
// binary as the servers' executable.
func startCluster(t *testing.T, dir string, args ...string) string {
	t.Helper()
	stopClusterAtCleanup(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, stderr, err := run(ctx, append([]string{"cluster", "start", "--dir", dir, "--binary", weftbin.Path(t)}, args...)...)
	if err != nil {
		t.Fatalf("cluster start: %v\n%s%s", err, out, stderr)
	}
	return out
}

// servers returns the processes the pid file of dir lists.
func servers(t *testing.T, dir string) []cluster.ProcInfo {
	t.Helper()
	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatalf("OpenProcs: %v", err)
	}
	return p.Servers()
}

// exited reports whether pid is gone (or a zombie that nobody reaped yet).
func exited(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[0] == "Z" || fields[0] == "X"
}

// serverAddrs lists every server address of a cluster file.
func serverAddrs(cfg *config.Cluster) []string {
	var addrs []string
	for _, m := range cfg.Meta {
		addrs = append(addrs, m.Addr)
	}
	for _, s := range cfg.Store {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

func answers(cfg *config.Cluster, addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	dial, err := cluster.DialOptions(cfg, "")
	if err != nil {
		return false
	}
	c, err := rpc.Dial(ctx, addr, dial)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func statusJSON(t *testing.T, file string) (*clusterStatus, error) {
	t.Helper()
	out, stderr, err := run(context.Background(), "--cluster", file, "status", "--json")
	var st clusterStatus
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
		t.Fatalf("status --json printed no JSON (%v): %s%s", jerr, out, stderr)
	}
	return &st, err
}

// TestClusterStartStatusStop runs the commands as a user does: the start
// is the real binary, whose servers outlive it; status, stop and a second
// start reuse the directory.
func TestClusterStartStatusStop(t *testing.T) {
	bin := weftbin.Path(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "weft.toml")
	stopClusterAtCleanup(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "cluster", "start", "--dir", dir, "--meta", "2", "--store", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("weft cluster start: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "export WEFT_CLUSTER="+file) {
		t.Errorf("start does not say how to use the cluster file:\n%s", out)
	}

	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Meta) != 2 || len(cfg.Store) != 2 {
		t.Fatalf("cluster file lists %d meta and %d store servers, want 2 and 2", len(cfg.Meta), len(cfg.Store))
	}
	addrs := serverAddrs(cfg)
	for i, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		if host != "127.0.0.1" || slices.Index(addrs, a) != i {
			t.Errorf("server address %q: want a distinct 127.0.0.1 port", a)
		}
		if !answers(cfg, a) {
			t.Errorf("no weft server answers at %s", a)
		}
	}
	procs := servers(t, dir)
	if len(procs) != 4 {
		t.Fatalf("pid file lists %d servers, want 4", len(procs))
	}
	for _, p := range procs {
		if !p.Running {
			t.Errorf("%s %d (pid %d) is not running after start returned", p.Role, p.ID, p.Pid)
		}
		if _, err := os.Stat(filepath.Join(dir, "logs", fmt.Sprintf("%s-%d.log", p.Role, p.ID))); err != nil {
			t.Errorf("log of %s %d: %v", p.Role, p.ID, err)
		}
	}

	st, err := statusJSON(t, file)
	if err != nil {
		t.Errorf("status of a running cluster: %v", err)
	}
	if len(st.Meta) != 2 || len(st.Store) != 2 {
		t.Fatalf("status shows %d meta and %d store servers", len(st.Meta), len(st.Store))
	}
	for _, m := range st.Meta {
		if !m.Up || m.Error != "" || m.Servers != 2 || m.Addr != cfg.Meta[m.ID].Addr {
			t.Errorf("status of meta %d: %+v; want up, counting 2 meta servers", m.ID, m)
		}
	}
	for _, s := range st.Store {
		if !s.Up || s.Capacity == 0 {
			t.Errorf("status of store %d: %+v; want up with a capacity", s.ID, s)
		}
	}
	if _, _, err := run(ctx, "--cluster", file, "mkdir", "/survives"); err != nil {
		t.Fatal(err)
	}

	out2, _, err := run(ctx, "cluster", "stop", "--dir", dir)
	if err != nil || !strings.Contains(out2, "stopped 4 servers") {
		t.Fatalf("cluster stop = %q, %v", out2, err)
	}
	for _, p := range procs {
		if !exited(p.Pid) {
			t.Errorf("%s %d (pid %d) still runs after stop", p.Role, p.ID, p.Pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pids")); !os.IsNotExist(err) {
		t.Errorf("pid file after stop: %v", err)
	}
	out2, _, err = run(ctx, "cluster", "stop", "--dir", dir)
	if err != nil || !strings.Contains(out2, "no cluster is running") {
		t.Errorf("second cluster stop = %q, %v; want success saying nothing runs", out2, err)
	}
	st, err = statusJSON(t, file)
	if ExitCode(err) != ExitUnavailable {
		t.Errorf("status of a stopped cluster: exit code %d (%v), want %d", ExitCode(err), err, ExitUnavailable)
	}
	for _, m := range st.Meta {
		if m.Up || m.Error == "" {
			t.Errorf("stopped meta %d: %+v", m.ID, m)
		}
	}

	out2 = startCluster(t, dir)
	if !strings.Contains(out2, "is up again: 2 meta, 2 store servers") {
		t.Errorf("second start says:\n%s", out2)
	}
	cfg2, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := serverAddrs(cfg2); !slices.Equal(got, addrs) {
		t.Errorf("second start moved the servers: %v, was %v", got, addrs)
	}
	ls, _, err := run(ctx, "--cluster", file, "ls", "/")
	if err != nil || !strings.Contains(ls, "survives") {
		t.Errorf("ls / after stop and start = %q, %v; want the directory made before", ls, err)
	}
}

func TestClusterStartRefusesRunningCluster(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--backend", "mem", "--mem-limit", "64MiB")
	before := servers(t, dir)
	file := filepath.Join(dir, "weft.toml")
	toml, _ := os.ReadFile(file)

	_, _, err := run(context.Background(), "cluster", "start", "--dir", dir, "--binary", weftbin.Path(t))
	if !errs.Is(err, errs.Busy) || !strings.Contains(err.Error(), "already running") || !strings.Contains(err.Error(), "cluster stop --dir") {
		t.Errorf("start on a running cluster: %v; want Busy saying it runs and how to stop it", err)
	}
	if after := servers(t, dir); !slices.Equal(after, before) {
		t.Errorf("refused start changed the processes: %+v, was %+v", after, before)
	}
	if toml2, _ := os.ReadFile(file); string(toml2) != string(toml) {
		t.Error("refused start changed the cluster file")
	}
	// A different layout of the same directory is refused too.
	_, _, err = run(context.Background(), "cluster", "start", "--dir", dir, "--meta", "3", "--binary", weftbin.Path(t))
	if err == nil || !strings.Contains(err.Error(), "holds a cluster of 1 meta and 1 store servers") {
		t.Errorf("start with another server count: %v", err)
	}
}

// TestClusterRestartAfterCrash: servers killed with SIGKILL leave their pid
// file behind; start sees that nothing runs and starts them again.
func TestClusterRestartAfterCrash(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir)
	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Servers() {
		if err := p.Kill(s.Role, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pids")); err != nil {
		t.Fatalf("pid file gone after kills: %v", err)
	}
	out := startCluster(t, dir)
	if !strings.Contains(out, "is up again") {
		t.Errorf("start after a crash says:\n%s", out)
	}
	for _, s := range servers(t, dir) {
		if !s.Running || !answers(p.Config(), s.Addr) {
			t.Errorf("%s %d not running after restart: %+v", s.Role, s.ID, s)
		}
	}
	out, _, err = run(context.Background(), "cluster", "stop", "--dir", dir, "--kill")
	if err != nil || !strings.Contains(out, "killed 2 servers") {
		t.Errorf("cluster stop --kill = %q, %v", out, err)
	}
}

func TestClusterStartBadFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no meta server", []string{"--meta", "0"}, "--meta 0: want at least 1"},
		{"no store server", []string{"--store", "0"}, "--store 0"},
		{"more meta servers than weft supports", []string{"--meta", "5000"}, "meta: 5000 is more than 4096"},
		{"too many for one machine", []string{"--store", "300"}, "store: 300 is more than 256"},
		{"split threshold", []string{"--split-threshold", "1"}, "split threshold: 1 is less than 2"},
		{"durability", []string{"--durability", "eventually"}, `--durability "eventually" is not one of sync, async`},
		{"backend", []string{"--backend", "tape"}, `--backend "tape"`},
		{"mem limit", []string{"--mem-limit", "lots"}, "--mem-limit"},
		{"replication above stores", []string{"--store", "2", "--replication", "3"}, "replication: 3 is more than the 2 store servers"},
		{"meta cpu", []string{"--meta-cpu", "-1"}, "--meta-cpu -1"},
		{"lease term", []string{"--lease-term", "2h"}, "--lease-term 2h0m0s: want between 200ms and 1m0s"},
		{"no dir", nil, "--dir is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cluster")
			args := []string{"cluster", "start", "--binary", "/nonexistent/weft"}
			if tt.name != "no dir" {
				args = append(args, "--dir", dir)
			}
			_, _, err := run(context.Background(), append(args, tt.args...)...)
			if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v (exit %d), want a usage error mentioning %q", err, ExitCode(err), tt.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("a refused start created %s", dir)
			}
		})
	}
	_, _, err := run(context.Background(), "cluster", "stop")
	if ExitCode(err) != ExitUsage {
		t.Errorf("cluster stop without --dir: %v", err)
	}
}

// TestClusterMetaCPU checks the CPU cap of meta servers where this machine
// allows cgroups (root and a cpu controller).
func TestClusterMetaCPU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--meta-cpu needs root")
	}
	dir := t.TempDir()
	stopClusterAtCleanup(t, dir)
	_, _, err := run(context.Background(), "cluster", "start", "--dir", dir, "--binary", weftbin.Path(t), "--meta-cpu", "0.25")
	if errs.Is(err, errs.NotSupported) || errs.Is(err, errs.NotPermitted) {
		t.Skipf("no usable cgroup cpu controller here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := cluster.OpenProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	cg := p.CgroupDir()
	meta := filepath.Join(cg, "meta-0")
	if quota, err := os.ReadFile(filepath.Join(meta, "cpu.cfs_quota_us")); err == nil {
		period, _ := os.ReadFile(filepath.Join(meta, "cpu.cfs_period_us"))
		q, _ := strconv.Atoi(strings.TrimSpace(string(quota)))
		per, _ := strconv.Atoi(strings.TrimSpace(string(period)))
		if per == 0 || q != per/4 {
			t.Errorf("cpu.cfs_quota_us = %q with period %q, want a quarter of the period", quota, period)
		}
	} else {
		max, err := os.ReadFile(filepath.Join(meta, "cpu.max"))
		if err != nil || strings.TrimSpace(string(max)) != "25000 100000" {
			t.Errorf("cpu.max = %q, %v; want 25000 100000", max, err)
		}
	}
	procs, _ := os.ReadFile(filepath.Join(meta, "cgroup.procs"))
	metaPid := p.Servers()[0].Pid
	if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(metaPid)) {
		t.Errorf("meta 0 (pid %d) is not in its cgroup; cgroup.procs = %q", metaPid, procs)
	}
	if _, err := os.Stat(filepath.Join(cg, "store-0")); !os.IsNotExist(err) {
		t.Errorf("the store is capped too: %v", err)
	}
	if _, _, err := run(context.Background(), "cluster", "stop", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left after stop: %v", cg, err)
	}
}
