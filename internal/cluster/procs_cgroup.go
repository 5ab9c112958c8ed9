package cluster

// CPU caps for the processes of a local cluster (ProcsOptions.MetaCPU): one
// cgroup per cluster directory, weft-HASH, under the CPU controller's mount,
// and one child per capped server (meta-0, ...) holding its process. With
// cgroup v1 the cap is cpu.cfs_quota_us over cpu.cfs_period_us; with cgroup
// v2 it is cpu.max. A process is moved into its cgroup right after it
// starts, so its first milliseconds are not capped.

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// cpuCgroup is the cgroup directory of one local cluster.
type cpuCgroup struct {
	root string // MOUNT/weft-HASH
	v2   bool
}

// cfsPeriod is the CPU quota's accounting period, in microseconds. A
// capped server that spends its quota is stopped until the period ends;
// 10 ms instead of the kernel's 100 ms keeps those stalls short, so the
// requests queued behind them (and the clients waiting on them) do not
// idle the other servers for long.
const cfsPeriod = 10000

// newCPUCgroup creates the cgroup of the cluster in dir (or reuses it).
func newCPUCgroup(dir string) (*cpuCgroup, error) {
	const op = "cap meta cpu"
	mount, v2, err := findCPUController()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errs.New(errs.NotPermitted, op, "capping CPU creates cgroups under %s, which needs root", mount)
	}
	h := fnv.New32a()
	h.Write([]byte(dir))
	g := &cpuCgroup{root: filepath.Join(mount, fmt.Sprintf("weft-%08x", h.Sum32())), v2: v2}
	if v2 {
		// Children of a cgroup get the cpu controller only when their
		// parent enables it for its subtree.
		if err := writeCgroupFile(filepath.Join(mount, "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(g.root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, cgroupError(op, g.root, err)
	}
	if v2 {
		if err := writeCgroupFile(filepath.Join(g.root, "cgroup.subtree_control"), "+cpu"); err != nil {
			g.remove()
			return nil, err
		}
	}
	return g, nil
}

// findCPUController returns where the CPU controller is mounted: a cgroup
// v1 hierarchy with the cpu controller if there is one, else a cgroup v2
// hierarchy that offers it.
func findCPUController() (mount string, v2 bool, err error) {
	const op = "cap meta cpu"
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, errs.Wrap(errs.NotSupported, op, "/proc/self/mountinfo", err)
	}
	defer f.Close()
	var unified []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS"
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		point, fstype, superOpts := fields[4], fields[sep+1], fields[sep+3]
		switch fstype {
		case "cgroup":
			if slices.Contains(strings.Split(superOpts, ","), "cpu") {
				return point, false, nil
			}
		case "cgroup2":
			unified = append(unified, point)
		}
	}
	for _, point := range unified {
		data, err := os.ReadFile(filepath.Join(point, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(data)), "cpu") {
			return point, true, nil
		}
	}
	return "", false, errs.New(errs.NotSupported, op, "no cgroup CPU controller is mounted (neither a cgroup v1 cpu hierarchy nor cgroup v2 offering cpu)")
}

// limit caps pid at cores CPUs in the child cgroup name.
func (g *cpuCgroup) limit(name string, pid int, cores float64) error {
	const op = "cap meta cpu"
	d := filepath.Join(g.root, name)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return cgroupError(op, d, err)
	}
	// The kernel takes quotas of 1 ms and more.
	period := max(int64(cfsPeriod), int64(math.Ceil(1000/cores)))
	quota := int64(cores * float64(period))
	if g.v2 {
		if err := writeCgroupFile(filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", quota, period)); err != nil {
			return err
		}
	} else {
		if err := writeCgroupFile(filepath.Join(d, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)); err != nil {
			return err
		}
		if err := writeCgroupFile(filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
	}
	return writeCgroupFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid))
}

// remove deletes the cluster's cgroups. The processes must have exited; a
// cgroup whose last process is exiting is busy for a moment, so removal is
// retried briefly.
func (g *cpuCgroup) remove() error {
	ents, err := os.ReadDir(g.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return cgroupError("remove cgroup", g.root, err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(g.root, e.Name()))
		}
	}
	var errList []error
	for _, d := range append(dirs, g.root) {
		if err := rmdirRetry(d); err != nil {
			errList = append(errList, cgroupError("remove cgroup", d, err))
		}
	}
	return errors.Join(errList...)
}

func rmdirRetry(d string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeCgroupFile writes one value to a cgroup control file, which exists
// already and must not be created or truncated.
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return cgroupError("cap meta cpu", path, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return cgroupError("cap meta cpu", path, fmt.Errorf("write %q: %w", value, err))
	}
	return nil
}

func cgroupError(op, path string, err error) error {
	kind := errs.IO
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		kind = errs.NotPermitted
	}
	return errs.Wrap(kind, op, path, err)
}
