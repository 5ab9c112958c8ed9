package bench

// durability: seed 003's tables per durability mode. Featherstitch ran its
// workloads on soft updates, a journal and "async", and counted the block
// writes each mode issued; weft's modes are sync (every change durable when
// acknowledged), writeback (the mount completes metadata changes itself and
// sends them in batches to sync servers) and async (acknowledged when
// applied, the WAL synced in the background). For each mode this runs the
// paper's block-write micro cases (create 100 small files; remove one file
// and add one), untar, rm -rf and PostMark through a FUSE mount, and counts
// the durable writes the servers made for each: WAL fsyncs at the meta
// server and chunk syncs at the store, from their own metrics.
//
// The mount runs in this process, as weft up --mount runs it (one meta and
// one disk store server, the mount calling them in-process; in writeback
// mode over loopback TCP, which its leases need), so the servers' metrics
// registry can be read directly and the end of each workload can make
// everything durable: FUSE does not forward syncfs(2) to its server, so
// "sync -f" alone does not reach weft's queues or servers.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/fusefs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// The durability benchmark's workloads, in the order they run on one mount.
const (
	durCreate   = "create 100 small files"
	durRmAdd    = "rm one file + add one"
	durUntar    = "untar"
	durDelete   = "rm -rf"
	durPostmark = "PostMark"
)

var durWorkloads = []string{durCreate, durRmAdd, durUntar, durDelete, durPostmark}

// What each workload reports; a result's Case is "WORKLOAD: WHAT".
const (
	durSeconds = "s"
	durWrites  = "durable writes"
	durWAL     = "meta WAL syncs"
	durChunk   = "store syncs"
)

// durMode is one column: the servers' durability and whether the mount
// writes metadata back.
type durMode struct {
	name       string
	servers    string // config.DurabilitySync or Async
	writeBack  bool
	featherish string // the Featherstitch mode it plays the role of
}

var durModes = []durMode{
	{"weft (sync)", config.DurabilitySync, false, "each change durable when acknowledged (an ordered synchronous write per operation)"},
	{"weft (writeback)", config.DurabilitySync, true, "changes completed in the client, sent in batches in order (soft updates' role: delayed, ordered)"},
	{"weft (async)", config.DurabilityAsync, false, "no order until the final sync (Featherstitch's async / ext2)"},
}

// durSmallFile is the size of the micro cases' files; the paper says
// "small" only.
const durSmallFile = 1024

func durabilityBenchmark() Benchmark {
	return Benchmark{
		Name: "durability",
		Seed: "seed 003, Featherstitch: untar, delete and PostMark per durability mode, and the block-write table",
		Doc: "per durability mode (sync, writeback, async): create 100 small files, rm one file + add one, untar, " +
			"rm -rf and PostMark through the mount, with the time and the durable writes (meta WAL syncs and store " +
			"syncs from the servers' metrics) of each",
		Notes: []string{
			"weft runs as weft up --mount does (one meta and one disk store server in this benchmark's process, the " +
				"FUSE mount calling them in-process; in writeback mode, sync servers and a writeback mount over loopback " +
				"TCP), in the default security mode. Each mode gets a fresh cluster; the workloads run one after the other " +
				"on its mount, each in a fresh directory, repeated.",
			"Every workload ends with everything durable, inside its time: sync -f of the mount, then what syncfs would " +
				"ask weft if FUSE forwarded it: the mount's written-back metadata sent (writeback), the store's chunks " +
				"synced (SyncStore), the meta server's WAL synced (SyncMeta). In sync mode these find nothing left to do.",
			"Durable writes are the servers' own counts over the workload: weft_meta_wal_syncs_total (pebble's WAL fsyncs; " +
				"concurrent commits share one; memtable flushes and compactions are not counted) plus " +
				"weft_store_syncs_total (fdatasyncs of chunk files and fsyncs of their directories). Featherstitch counted " +
				"block writes at the disk. Files up to 64 KiB live inline in the meta server's records, so their data costs " +
				"no store sync.",
			fmt.Sprintf("Micro cases: %d B files in one directory (the paper: \"small\"). untar: the first 10,000 entries of "+
				"Debian's linux-source (the untar benchmark's input; --quick: 1,000), or, without that package, the Andrew "+
				"benchmark's generated tree. PostMark: 1,000 files of 500 B–10 KB, 5,000 transactions (--quick: 100, 250). "+
				"Median over repeats with min–max.", durSmallFile),
		},
		Run:    runDurability,
		Tables: durabilityTables,
		Paper:  []Table{paperBlockWrites, paperUntar, paperPostmark, paperFeatherstitchModes},
		Goals:  durabilityGoals,
	}
}

var paperBlockWrites = Table{
	Title: "**The paper's numbers** (Featherstitch/\"Kudos\" draft, seed 003): block writes of two micro cases, " +
		"each followed by a sync.",
	Header: []string{"test", "Kudos (soft updates)", "FreeBSD soft updates", "Kudos full journal", "Kudos no journal"},
	Rows: [][]string{
		{"create 100 small files", "122", "135", "245", "126"},
		{"rm one file + add one", "15", "83", "31", "18"},
	},
}

var paperFeatherstitchModes = Table{
	Title: "**The published numbers** (Featherstitch, SOSP'07, §8.2): seconds; Pentium 4 3.2 GHz, 912 MB RAM, " +
		"7200 RPM SATA disk, mean of 5 runs.",
	Header: []string{"system", "untar (s)", "delete (s)", "PostMark (s)"},
	Rows: [][]string{
		{"Featherstitch, soft updates", "6.4", "0.8", "38.3"},
		{"Featherstitch, metadata journal", "5.8", "1.4", "48.3"},
		{"Linux ext3, writeback journal", "16.6", "4.5", "38.2"},
	},
}

func runDurability(ctx context.Context, env *Env) ([]Result, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("mounting weft in this process needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("no FUSE: %w", err)
	}
	pm, err := env.run.tools.debian(ctx, "postmark", "postmark")
	if err != nil {
		return nil, err
	}
	env.run.version("postmark", "PostMark "+postmarkVersion(pm))
	tarball, err := durabilityTarball(ctx, env)
	if err != nil {
		return nil, err
	}
	if err := readAll(tarball); err != nil {
		return nil, err
	}
	files, transactions := 1000, 5000
	if env.Quick {
		files, transactions = 100, 250
	}
	reps := env.repeats()
	env.progress(len(durModes) * reps * len(durWorkloads))
	var out []Result
	for _, mode := range durModes {
		res := map[string]*Result{}
		get := func(workload, what, unit string) *Result {
			k := workload + ": " + what
			if res[k] == nil {
				res[k] = &Result{Bench: "durability", Case: k, Target: mode.name, Unit: unit}
			}
			return res[k]
		}
		err := func() error {
			base := filepath.Join(env.Dir, "mode-"+mode.servers+fmt.Sprint(mode.writeBack))
			defer os.RemoveAll(base)
			dc, err := startDurCluster(ctx, base, mode)
			if err != nil {
				return err
			}
			defer dc.Close()
			for r := range reps {
				dir := filepath.Join(dc.mnt, fmt.Sprintf("r%d", r))
				work := map[string]func() error{
					durCreate: func() error { return durCreateFiles(filepath.Join(dir, "small"), 100) },
					durRmAdd: func() error {
						small := filepath.Join(dir, "small")
						if err := os.Remove(filepath.Join(small, "f000")); err != nil {
							return err
						}
						return os.WriteFile(filepath.Join(small, "added"), durContent(), 0o644)
					},
					durUntar: func() error {
						u := filepath.Join(dir, "untar")
						if err := os.Mkdir(u, 0o755); err != nil {
							return err
						}
						return run(ctx, 30*time.Minute, "tar", "-xf", tarball, "-C", u)
					},
					durDelete: func() error { return run(ctx, 30*time.Minute, "rm", "-rf", filepath.Join(dir, "untar")) },
					durPostmark: func() error {
						conf := filepath.Join(env.Dir, fmt.Sprintf("postmark-%d.conf", r))
						_, _, err := postmarkOnce(ctx, pm, conf, filepath.Join(dir, "pm"), files, transactions)
						return err
					},
				}
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				// The mkdir is not any workload's.
				if err := dc.syncfs(ctx); err != nil {
					return err
				}
				for _, w := range durWorkloads {
					env.step(mode.name + ": " + w)
					secs, wal, chunk, err := dc.measure(ctx, work[w])
					if err != nil {
						return fmt.Errorf("%s: %w", w, err)
					}
					get(w, durSeconds, "s").Samples = append(get(w, durSeconds, "s").Samples, secs)
					get(w, durWrites, "per workload").Samples = append(get(w, durWrites, "per workload").Samples, wal+chunk)
					get(w, durWAL, "per workload").Samples = append(get(w, durWAL, "per workload").Samples, wal)
					get(w, durChunk, "per workload").Samples = append(get(w, durChunk, "per workload").Samples, chunk)
				}
			}
			return nil
		}()
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			env.skip(mode.name, err)
			continue
		}
		for _, w := range durWorkloads {
			for _, what := range []string{durSeconds, durWrites, durWAL, durChunk} {
				if r := res[w+": "+what]; r != nil {
					out = append(out, *r)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no durability mode ran (see the skipped targets)")
	}
	return out, nil
}

// durabilityTarball is the untar benchmark's input, or a tar of the Andrew
// tree where Debian's linux-source is not available.
func durabilityTarball(ctx context.Context, env *Env) (string, error) {
	entries, shape := 10000, andrewFull
	if env.Quick {
		entries, shape = 1000, andrewQuick
	}
	p, err := untarInput(ctx, env, entries)
	if err == nil {
		return p, nil
	}
	env.Log.Info("durability: no linux-source tarball, using the generated Andrew tree", "err", err)
	tree, terr := loadAndrewTree(env.run.tools.cache, shape)
	if terr != nil {
		return "", errors.Join(err, terr)
	}
	out := tree.Root + ".tar"
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := run(ctx, 10*time.Minute, "tar", "-cf", out+".tmp", "--exclude=.complete", "-C", tree.Root, "."); err != nil {
		os.Remove(out + ".tmp")
		return "", err
	}
	env.run.version("untar input", fmt.Sprintf("generated tree, %d files", len(tree.Files)))
	return out, os.Rename(out+".tmp", out)
}

func durContent() []byte {
	b := make([]byte, durSmallFile)
	for i := range b {
		b[i] = "0123456789abcdef"[i%16]
	}
	return b
}

// durCreateFiles makes dir and n small files in it, one write and close each.
func durCreateFiles(dir string, n int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	data := durContent()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// durCluster is one mode's cluster and its mount, in this process.
type durCluster struct {
	e     *cluster.Embedded
	c     *client.Client
	m     *fusefs.Mount
	mnt   string
	store *rpc.Peer // the store server, called in-process to sync it
}

func startDurCluster(ctx context.Context, dir string, mode durMode) (_ *durCluster, err error) {
	quiet := slog.New(slog.DiscardHandler)
	e, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: filepath.Join(dir, "data"),
		Durability: mode.servers, Backend: config.BackendDisk, Logger: quiet})
	if err != nil {
		return nil, err
	}
	dc := &durCluster{e: e, mnt: filepath.Join(dir, "mnt")}
	defer func() {
		if err != nil {
			err = errors.Join(err, dc.Close())
		}
	}()
	local := e.Local()
	cc := cluster.ClientConfig(e.Config(), core.Root, quiet)
	// The store's peer carries the admin identity, as the mount's client
	// does in a secured cluster.
	opts := rpc.DialOptions{Local: local[e.StoreAddr()]}
	if cc.Identity != "" {
		id, err := auth.LoadIdentity(cc.Identity)
		if err != nil {
			return dc, err
		}
		id.DialOptions(&opts)
		opts.Local = local[e.StoreAddr()]
	}
	dc.store = rpc.NewPeer(e.StoreAddr(), opts)
	if mode.writeBack {
		// As weft up --durability writeback: sync servers, a writeback
		// mount over TCP, which its leases are recalled over.
		cc.WriteBack = true
	} else {
		cc.Local = local
	}
	if dc.c, err = client.New(cc); err != nil {
		return dc, err
	}
	if err := os.MkdirAll(dc.mnt, 0o755); err != nil {
		return dc, err
	}
	dc.m, err = fusefs.New(dc.mnt, fusefs.Options{Client: dc.c, Logger: quiet, FsName: "weft-bench"})
	return dc, err
}

// Close unmounts and stops everything, in bounded time.
func (dc *durCluster) Close() error {
	var all []error
	if dc.m != nil {
		if err := dc.m.Unmount(false); err != nil {
			all = append(all, dc.m.Unmount(true))
		}
		dc.m = nil
	}
	if dc.c != nil {
		all = append(all, dc.c.Close())
		dc.c = nil
	}
	if dc.store != nil {
		all = append(all, dc.store.Close())
		dc.store = nil
	}
	if dc.e != nil {
		all = append(all, dc.e.Close())
		dc.e = nil
	}
	return errors.Join(all...)
}

// durableWrites reads the servers' counters: WAL syncs and store syncs.
// Pebble counts a WAL fsync after it has woken the commits that waited for
// it, so a read just after a sync returned can miss that sync: the counts
// are read again until two reads 20 ms apart agree (at most 1 s).
func (dc *durCluster) durableWrites() (wal, chunk float64) {
	reg := dc.e.Registry()
	read := func() (float64, float64) {
		return counterValue(reg, "weft_meta_wal_syncs_total"), counterValue(reg, "weft_store_syncs_total")
	}
	wal, chunk = read()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		w, c := read()
		if w == wal && c == chunk {
			break
		}
		wal, chunk = w, c
	}
	return wal, chunk
}

// syncfs makes everything written through the mount durable, as a syncfs
// forwarded to weft would: the kernel's dirty pages, the mount's queued
// metadata, the store's chunks, then the meta server's WAL (data before the
// records that name it).
func (dc *durCluster) syncfs(ctx context.Context) error {
	if err := run(ctx, 10*time.Minute, "sync", "-f", dc.mnt); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := dc.c.SyncAll(ctx); err != nil {
		return err
	}
	if err := dc.store.Call(ctx, pb.MethodSyncStore, &pb.SyncStoreRequest{}, &pb.Empty{}); err != nil {
		return err
	}
	return dc.c.SyncNamespace(ctx)
}

// measure runs work then syncfs, and returns the seconds they took and the
// durable writes the servers made meanwhile.
func (dc *durCluster) measure(ctx context.Context, work func() error) (secs, wal, chunk float64, err error) {
	wal0, chunk0 := dc.durableWrites()
	start := time.Now()
	if err := work(); err != nil {
		return 0, 0, 0, err
	}
	if err := dc.syncfs(ctx); err != nil {
		return 0, 0, 0, err
	}
	secs = time.Since(start).Seconds()
	wal1, chunk1 := dc.durableWrites()
	return secs, wal1 - wal0, chunk1 - chunk0, nil
}

func durabilityTables(rs []Result) []Table {
	med := func(c, target string) (Result, bool) {
		r, ok := find(rs, c, target)
		return r, ok && len(r.Samples) > 0
	}
	var modes []string
	for _, m := range durModes {
		if _, ok := med(durUntar+": "+durSeconds, m.name); ok {
			modes = append(modes, m.name)
		}
	}
	writes := Table{
		Title:  "Durable writes per workload (median over repeats; meta WAL syncs + store syncs), the analogue of the paper's block-write table:",
		Header: append([]string{"workload"}, modes...),
	}
	times := Table{
		Title:  "Seconds per workload, including the final sync (median over repeats, min–max):",
		Header: append([]string{"workload"}, modes...),
	}
	for _, w := range durWorkloads {
		wrow, trow := []string{w}, []string{w}
		for _, m := range modes {
			total, ok := med(w+": "+durWrites, m)
			wal, _ := med(w+": "+durWAL, m)
			chunk, _ := med(w+": "+durChunk, m)
			if !ok {
				wrow = append(wrow, "")
			} else {
				wrow = append(wrow, fmt.Sprintf("%s (%s + %s)", count(total.Median()), count(wal.Median()), count(chunk.Median())))
			}
			t, ok := med(w+": "+durSeconds, m)
			trow = append(trow, cell(t, ok))
		}
		writes.Rows = append(writes.Rows, wrow)
		times.Rows = append(times.Rows, trow)
	}
	var modeNotes []string
	for _, m := range durModes {
		modeNotes = append(modeNotes, fmt.Sprintf("%s: %s.", m.name, m.featherish))
	}
	writes.Notes = modeNotes
	return []Table{writes, times}
}

func durabilityGoals(rs []Result) []string {
	get := func(c, target string) float64 {
		if r, ok := find(rs, c, target); ok && len(r.Samples) > 0 {
			return r.Median()
		}
		return 0
	}
	// Kudos's soft updates against its async mode, in the draft's table.
	paper := map[string]string{durUntar: "; the paper: soft updates 3.0× of async", durDelete: "; the paper: soft updates 2.0× of async"}
	var out []string
	for _, w := range []string{durUntar, durDelete, durPostmark} {
		s, wb, a := get(w+": "+durSeconds, durModes[0].name), get(w+": "+durSeconds, durModes[1].name), get(w+": "+durSeconds, durModes[2].name)
		if s == 0 || wb == 0 || a == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("durability: %s takes %.2f× the async time in sync mode and %.2f× in writeback, with %s, %s and %s durable writes (informational%s)",
			w, s/a, wb/a, count(get(w+": "+durWrites, durModes[0].name)), count(get(w+": "+durWrites, durModes[1].name)),
			count(get(w+": "+durWrites, durModes[2].name)), paper[w]))
	}
	return out
}

// count formats a count: whole numbers without decimals (a median of two
// samples may end in .5).
func count(v float64) string {
	if v == float64(int64(v)) {
		return groupThousands(fmt.Sprintf("%d", int64(v)))
	}
	return fmt.Sprintf("%.1f", v)
}
