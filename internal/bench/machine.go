package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a run happened.
type Machine struct {
	CPUs    int    `json:"cpus"`
	Model   string `json:"cpu_model"`
	Memory  string `json:"memory"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	DataDir string `json:"data_dir"`
	// Disk is the file system that holds DataDir (the local target).
	Disk string `json:"disk,omitempty"`
}

func describeMachine(dataDir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), DataDir: dataDir}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				m.Model = strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			var kb float64
			fmt.Sscan(f[1], &kb)
			m.Memory = fmt.Sprintf("%.0f GiB", kb/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("df", "-T", dataDir).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 2 {
			m.Disk = f[1] + " on " + f[0]
		}
	}
	return m
}

// commandVersion runs a program's version option and returns the first line
// of what it prints, or "" if it does not run.
func commandVersion(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// versionLine runs a program's version option and returns the first line
// that contains marker (sshfs prints fusermount's version first).
func versionLine(name, marker string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, marker) {
			return strings.TrimSpace(line)
		}
	}
	return commandVersion(name, args...)
}

// nfsNote says why NFS, the seeds' usual comparator, has no row.
func nfsNote() string {
	b, err := os.ReadFile("/proc/filesystems")
	if err == nil && strings.Contains(string(b), "\tnfs\n") {
		return "NFS, the seeds' usual comparator, is not a target of this suite yet."
	}
	return "NFS, the seeds' usual comparator, has no row: this kernel has no NFS client " +
		"(no nfs in /proc/filesystems; mount -t nfs fails with \"No such device\")."
}
