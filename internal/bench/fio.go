package bench

// fio: issue 3's sequential I/O, Debian's fio writing and reading a 1 GiB
// file in 1 MiB blocks, with cold and with warm caches, against the goals of
// the issue (weft at least 2× sshfs and at least half the local disk).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// fioCases are the four measurements, in order: each runs right after the
// one before, on the same file.
var fioCases = []string{"write, cold", "write, warm", "read, cold", "read, warm"}

// fioCPUCases are the CPU time the target's processes used in each case, for
// targets whose processes the suite knows (weft as separate processes).
var fioCPUCases = []string{"write, cold, CPU", "write, warm, CPU", "read, cold, CPU", "read, warm, CPU"}

// fioCPUUnit is the unit of the CPU rows: milliseconds of CPU (user and
// system, every process of the target) per GiB moved.
const fioCPUUnit = "CPU ms/GiB"

func fioBenchmark() Benchmark {
	return Benchmark{
		Name:  "fio",
		Group: GroupFUSE,
		Seed:  "issue 3, FUSE mount against peers",
		Doc: "Sequential write and read of a 1 GiB file in 1 MiB blocks with fio (Debian's), cold and warm " +
			"cache; MB/s",
		Notes: []string{
			"fio --rw=write|read --bs=1M --size=1G --ioengine=psync --fallocate=none, one job, buffered I/O " +
				"(--quick: 16 MiB). Writes end with an fsync (--end_fsync=1, inside fio's timing), so every target " +
				"is measured writing durably, not into the page cache alone. In order, on one file: " +
				"\"write, cold\" creates it, after the page cache was emptied (sync, then echo 3 > " +
				"/proc/sys/vm/drop_caches); \"write, warm\" overwrites it at once, its pages cached " +
				"(--invalidate=0, so fio does not drop them itself); \"read, cold\" reads it after the target " +
				"was remounted (a FUSE target's daemon restarts, weft's servers too) and the page cache emptied " +
				"again, which also empties the local disk's cache under weft's store, JuiceFS's objects and " +
				"sshfs's export (tmpfs, under loopback, keeps its content); \"read, warm\" reads it again at " +
				"once (--invalidate=0). " +
				"Median over repeats with min–max.",
			"weft (none), (secure) and (private) are the security modes (issue 13), each as separate processes " +
				"(weft cluster start, then weft mount) so that the mount's calls cross real connections; the goal " +
				"for secure is at most 10% below none. They are mounted at once and their repeats interleaved (each " +
				"repeat starts one mode later than the last), so that load that changes during the run lands on " +
				"every mode alike; the other targets run one after the other.",
			"For weft as separate processes a second table gives the CPU time (user and system, from " +
				"/proc/PID/stat) its meta and store servers and its mount daemon used during each case, per GiB: " +
				"on a shared machine load changes a rate from one minute to the next, but hardly the CPU a " +
				"process spends per byte, so a mode's cost shows there first.",
		},
		Run:     runFio,
		Tables:  fioTables,
		Figures: fioFigures,
		Goals:   fioGoals,
	}
}

func fioSize(quick bool) int64 {
	if quick {
		return 16 << 20
	}
	return 1 << 30
}

func runFio(ctx context.Context, env *Env) ([]Result, error) {
	bin, err := env.run.tools.debian(ctx, "fio", "fio")
	if err != nil {
		return nil, err
	}
	env.run.version("fio", commandVersion(bin, "--version"))
	size := fioSize(env.Quick)
	reps := env.repeats()
	peers, modes := env.peerTargets(), env.securityTargets()
	env.progress((len(peers) + len(modes)) * (1 + reps*len(fioCases)))
	// repeat measures every case once on m, in order, on one file: MB/s
	// in rows, and in cpuRows (if m's processes are known) the CPU time
	// they used per GiB.
	repeat := func(m *Mount, rows, cpuRows caseRows) error {
		file := filepath.Join(m.Dir, "fio.dat")
		rates := make([]float64, len(fioCases))
		cpus := make([]float64, len(fioCases))
		withCPU := false
		for i, c := range fioCases {
			env.step(m.Target.Name + ": " + c)
			if err := fioCool(ctx, m, c); err != nil {
				return err
			}
			before, ok, err := m.CPU()
			if err != nil {
				return fmt.Errorf("%s: CPU time: %w", c, err)
			}
			rate, err := fioRun(ctx, bin, file, size, c)
			if err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
			rates[i] = rate
			if withCPU = ok; ok {
				after, _, err := m.CPU()
				if err != nil {
					return fmt.Errorf("%s: CPU time: %w", c, err)
				}
				cpus[i] = float64(after-before) / float64(time.Millisecond) * float64(1<<30) / float64(size)
			}
		}
		rows.add(rates)
		if withCPU {
			cpuRows.add(cpus)
		}
		return os.Remove(file)
	}
	var out []Result
	err = env.eachTarget(ctx, peers, nil, func(m *Mount) error {
		rows := newCaseRows("fio", m.Target.Name, "MB/s", fioCases)
		cpuRows := newCaseRows("fio", m.Target.Name, fioCPUUnit, fioCPUCases)
		for range reps {
			if err := repeat(m, rows, cpuRows); err != nil {
				return err
			}
		}
		out = append(out, rows...)
		if len(cpuRows[0].Samples) > 0 {
			out = append(out, cpuRows...)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	// The security modes are compared with each other (secure within 10%
	// of none): all mounted at once, their repeats interleaved, so that
	// the machine's drift lands on every mode alike.
	rows := make(map[string][2]caseRows) // MB/s, CPU
	failed := make(map[string]bool)      // skipped: no row
	err = env.eachTargetInterleaved(ctx, modes, reps, func(m *Mount, _ int) error {
		r, ok := rows[m.Target.Name]
		if !ok {
			r = [2]caseRows{
				newCaseRows("fio", m.Target.Name, "MB/s", fioCases),
				newCaseRows("fio", m.Target.Name, fioCPUUnit, fioCPUCases),
			}
			rows[m.Target.Name] = r
		}
		err := repeat(m, r[0], r[1])
		if err != nil {
			failed[m.Target.Name] = true
		}
		return err
	})
	for _, t := range modes {
		if r, ok := rows[t.Name]; ok && !failed[t.Name] {
			out = append(out, r[0]...)
			if len(r[1][0].Samples) > 0 {
				out = append(out, r[1]...)
			}
		}
	}
	return out, err
}

// fioCool prepares case c: a cold write empties the page cache (the file is
// new, so nothing of it is cached anywhere); a cold read also remounts the
// target first, so that its daemon holds nothing of the file.
func fioCool(ctx context.Context, m *Mount, c string) error {
	switch c {
	case "read, cold":
		if err := m.Remount(ctx); err != nil {
			return fmt.Errorf("remount: %w", err)
		}
		fallthrough
	case "write, cold":
		return dropCaches(ctx)
	}
	return nil
}

// fioRun runs one fio job of case c ("write, cold" …) on file and returns
// fio's bandwidth in MB/s.
func fioRun(ctx context.Context, bin, file string, size int64, c string) (float64, error) {
	op, temp, _ := strings.Cut(c, ", ")
	if op == "write" && temp == "cold" {
		// A new file: what an earlier repeat left is gone already, but make sure.
		if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
			return 0, err
		}
	}
	args := []string{
		"--name=seq", "--filename=" + strings.ReplaceAll(file, ":", `\:`),
		"--rw=" + op, "--bs=1M", fmt.Sprintf("--size=%d", size),
		"--ioengine=psync", "--fallocate=none", "--output-format=json",
	}
	if op == "write" {
		args = append(args, "--end_fsync=1")
	}
	if temp == "warm" {
		args = append(args, "--invalidate=0")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("fio %s: %v: %s", strings.Join(args, " "), err, lastLine([]byte(stderr.String()+string(stdout))))
	}
	return parseFioBandwidth(stdout, op, size)
}

// parseFioBandwidth reads fio's JSON output (which some fio versions precede
// with notes) and returns the job's bandwidth for op in MB/s, checking that
// the job moved size bytes without error.
func parseFioBandwidth(out []byte, op string, size int64) (float64, error) {
	i := strings.IndexByte(string(out), '{')
	if i < 0 {
		return 0, fmt.Errorf("no JSON in fio's output: %s", lastLine(out))
	}
	type stats struct {
		IOBytes int64   `json:"io_bytes"`
		BW      float64 `json:"bw_bytes"`
	}
	var rep struct {
		Jobs []struct {
			Error int   `json:"error"`
			Read  stats `json:"read"`
			Write stats `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out[i:], &rep); err != nil {
		return 0, fmt.Errorf("fio's JSON: %w", err)
	}
	if len(rep.Jobs) != 1 {
		return 0, fmt.Errorf("fio reported %d jobs, want 1", len(rep.Jobs))
	}
	j := rep.Jobs[0]
	if j.Error != 0 {
		return 0, fmt.Errorf("fio job failed with error %d", j.Error)
	}
	s := j.Read
	if op == "write" {
		s = j.Write
	}
	if s.IOBytes != size || s.BW <= 0 {
		return 0, fmt.Errorf("fio %s moved %d bytes at %v B/s, want %d bytes", op, s.IOBytes, s.BW, size)
	}
	return s.BW / 1e6, nil
}

func fioTables(rs []Result) []Table {
	rates, cpu := splitFioCPU(rs)
	ts := []Table{caseTable(rates, fioCases, "MB/s", "Sequential I/O in 1 MiB blocks, MB/s (median over repeats, min–max):")}
	if len(cpu) > 0 {
		ts = append(ts, caseTable(cpu, fioCPUCases, "ms/GiB", "CPU time of the target's processes (its servers and the "+
			"mount daemon; user and system), ms per GiB moved (median over repeats, min–max):"))
	}
	return ts
}

func fioFigures(rs []Result) []Figure {
	rates, _ := splitFioCPU(rs)
	return []Figure{barFigure("fio", "Sequential I/O in 1 MiB blocks (fio)", "MB/s", rates, byCase, byTarget)}
}

// splitFioCPU separates the MB/s results from the CPU ones.
func splitFioCPU(rs []Result) (rates, cpu []Result) {
	for _, r := range rs {
		if r.Unit == fioCPUUnit {
			cpu = append(cpu, r)
		} else {
			rates = append(rates, r)
		}
	}
	return rates, cpu
}

// fioGoals: sequential read and write ≥ 2× sshfs and ≥ 50% of the local
// disk, cold and warm.
func fioGoals(rs []Result) []string {
	var out []string
	for _, c := range fioCases {
		out = append(out,
			goalAtLeast(rs, "fio "+c, c, weftSync.name, kindSSHFS, 2, false),
			goalAtLeast(rs, "fio "+c, c, weftSync.name, kindLocal, 0.5, false),
			goalAtLeast(rs, "fio "+c, c, weftSecure.name, weftNone.name, 0.9, false),
			goalAtLeast(rs, "fio "+c, c, weftPrivate.name, weftNone.name, 0.85, false))
	}
	// What secure mode costs in CPU, which load on a shared machine
	// does not blur as it blurs a rate (lower is better). A warm read
	// is the kernel's page cache: the processes hardly run.
	for _, c := range fioCPUCases[:3] {
		if _, ok := find(rs, c, weftSecure.name); ok {
			out = append(out, goalAtLeast(rs, "fio "+c, c, weftSecure.name, weftNone.name, 0.9, true))
		}
	}
	return out
}
