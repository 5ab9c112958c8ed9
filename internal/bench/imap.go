package bench

// imap: seed 003's IMAP case study (Featherstitch, §8.3). A mail server on
// a maildir-like layout moves N 2 kB messages from INBOX to another folder
// (COPY, then EXPUNGE from INBOX), either with an fsync at every step, as
// UW IMAP does for crash safety, or with patchgroups: the copies in one
// group, the expunge in a second that depends on it, and one pg_sync at the
// end. Both end with everything durable; the patchgroup run gets the same
// order without an fsync per step.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

const imapMessageSize = 2048

// Cases of the imap benchmark.
const (
	imapTime  = "move N messages: seconds"
	imapSyncs = "durable writes (fsyncs; for weft: WAL fsyncs at the meta server and chunk syncs at the store, from their metrics)"
	imapRPCs  = "requests to the servers"
)

// imap targets.
const (
	imapFsync     = "weft, fsync per step (sync)"
	imapPG        = "weft, patchgroups (async)"
	imapPGWB      = "weft, patchgroups (async, write-back client)"
	imapPGWBSync  = "weft, patchgroups (sync, write-back client)"
	imapUnordered = "weft, no ordering (async; unsafe)"
	imapExt4Fsync = "local disk, fsync per step"
	imapExt4None  = "local disk, no fsync (unsafe)"
)

func imapBenchmark() Benchmark {
	return Benchmark{
		Name: "imap",
		Seed: "seed 003, Featherstitch's IMAP case study (§8.3)",
		Doc: "move N 2 kB messages from INBOX to another folder (COPY then EXPUNGE) on a maildir layout: " +
			"fsync per step against patchgroups, with the time, the durability requests and the requests sent",
		Notes: []string{
			"weft runs through the client library on an in-process cluster (one meta and one disk store server). " +
				"The folders are looked up once per move (a server on a kernel file system finds them in the dentry cache; " +
				"the library has no name cache), so each step is its own requests only: create, commit, rename, unlink. " +
				"fsync per step: sync durability, each copied message written to tmp/, fsynced, closed, renamed into cur/; " +
				"then each INBOX message unlinked (the meta server syncs its WAL for each change). Patchgroups: async " +
				"durability, the copies engaged in one group, the unlinks in a second that depends on it, and one pg_sync " +
				"at the end. With a write-back client, the same groups, and the client completes the creates, commits, renames " +
				"(tmp/ to cur/ included) and unlinks in the folders it holds write leases on, and sends them in batches; with " +
				"sync durability each batch is one WAL fsync when applied. The messages in INBOX are delivered by another " +
				"client before the move. No ordering: async, no fsync, one sync of the namespace at the end, and no guarantee of order.",
			"Durable writes count, for weft, the meta server's WAL fsyncs (weft_meta_wal_syncs_total: concurrent commits " +
				"share one) and the store's fdatasyncs of chunk files and fsyncs of their directories (weft_store_syncs_total); " +
				"for the local disk, the fsync calls. The paper counted disk write requests: 2,531 with fsync per step against " +
				"26 with patchgroups for 1,000 messages on ext3. N is 1,000 (--quick: 100).",
		},
		Run:    runIMAP,
		Tables: imapTables,
		Paper:  []Table{paperIMAP},
		Goals:  imapGoals,
	}
}

var paperIMAP = Table{
	Title:  "Paper (Featherstitch, SOSP 2007, §8.3: UW IMAP moving 1,000 messages; ext3 on a SATA disk)",
	Header: []string{"configuration", "time (s)", "write requests"},
	Rows: [][]string{
		{"fsync per step (ext3)", "19.9", "2,531"},
		{"patchgroups (Featherstitch)", "1.3", "26"},
	},
}

// callCounter counts a client's requests.
type callCounter struct{ all atomic.Int64 }

func (c *callCounter) Observe(uint16, time.Duration, int, int, error) { c.all.Add(1) }

// durableWrites sums the cluster's durable-write counters: the meta
// server's WAL fsyncs and the stores' chunk syncs.
func (lc *libCluster) durableWrites() float64 {
	n := counterValue(lc.meta.Registry(), "weft_meta_wal_syncs_total")
	for _, st := range lc.stores {
		n += counterValue(st.Registry(), "weft_store_syncs_total")
	}
	return n
}

// counterValue sums the counter called name in reg.
func counterValue(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

func runIMAP(ctx context.Context, env *Env) ([]Result, error) {
	n := 1000
	if env.Quick {
		n = 100
	}
	reps := env.repeats()
	targets := []string{imapFsync, imapPG, imapPGWB, imapPGWBSync, imapUnordered, imapExt4Fsync, imapExt4None}
	env.progress(len(targets) * reps)
	var out []Result
	for _, target := range targets {
		rt := Result{Bench: "imap", Case: imapTime, Target: target, Unit: "s", X: float64(n)}
		rs := Result{Bench: "imap", Case: imapSyncs, Target: target, Unit: "per move"}
		rr := Result{Bench: "imap", Case: imapRPCs, Target: target, Unit: "per move"}
		for range reps {
			env.step(target)
			secs, syncs, rpcs, err := imapOnce(ctx, env, target, n)
			if err != nil {
				env.skip(target, err)
				break
			}
			rt.Samples = append(rt.Samples, secs)
			rs.Samples = append(rs.Samples, float64(syncs))
			if rpcs >= 0 {
				rr.Samples = append(rr.Samples, float64(rpcs))
			}
		}
		if len(rt.Samples) > 0 {
			out = append(out, rt, rs)
			if len(rr.Samples) > 0 {
				out = append(out, rr)
			}
		}
	}
	return out, nil
}

// imapOnce runs one move of n messages on a fresh store and returns the
// seconds it took, its durability requests and its requests (-1 for the
// local disk).
func imapOnce(ctx context.Context, env *Env, target string, n int) (float64, int64, int64, error) {
	dir, err := os.MkdirTemp(env.Dir, "imap-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	switch target {
	case imapExt4Fsync, imapExt4None:
		return imapLocal(filepath.Join(dir, "mail"), n, target == imapExt4Fsync)
	}
	durability := config.DurabilityAsync
	if target == imapFsync || target == imapPGWBSync {
		durability = config.DurabilitySync
	}
	lc, err := startLib(ctx, dir, libOptions{Durability: durability, Backend: config.BackendDisk})
	if err != nil {
		return 0, 0, 0, err
	}
	defer lc.Close()
	// INBOX is filled by another client, as a mail delivery agent
	// would, and closed: the IMAP server's client then finds the
	// folders as they are on the servers (a write-back client reads a
	// folder's names once under its lease, not one lookup per message
	// the delivering client had synced).
	deliverer, err := client.New(cluster.ClientConfig(lc.cfg, core.Root, nil))
	if err != nil {
		return 0, 0, 0, err
	}
	err = imapSetup(ctx, deliverer, n)
	if cerr := deliverer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, 0, err
	}
	counter := &callCounter{}
	cc := cluster.ClientConfig(lc.cfg, core.Root, nil)
	cc.Dial.Observer = counter
	// The write-back client completes the changes in directories it holds
	// a write lease on itself and sends them in batches; the patchgroups'
	// barrier orders the batches (docs/design.md, "Write ordering").
	cc.WriteBack = target == imapPGWB || target == imapPGWBSync
	c, err := client.New(cc)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	m, err := openMaildir(ctx, c)
	if err != nil {
		return 0, 0, 0, err
	}
	all0, durable0 := counter.all.Load(), lc.durableWrites()
	start := time.Now()
	switch target {
	case imapFsync:
		err = imapMoveFsync(ctx, c, m, n)
	case imapPG, imapPGWB, imapPGWBSync:
		err = imapMovePG(ctx, c, m, n)
	default:
		err = imapMoveUnordered(ctx, c, m, n)
	}
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, 0, 0, err
	}
	return secs, int64(lc.durableWrites() - durable0), counter.all.Load() - all0, nil
}

func imapMsgName(i int) string {
	return fmt.Sprintf("%d.M%dP1.weft,S=%d:2,S", 1700000000+i, i, imapMessageSize)
}

// imapSetup makes the two folders and fills INBOX, durably.
func imapSetup(ctx context.Context, c *client.Client, n int) error {
	for _, d := range []string{"/mail", "/mail/INBOX", "/mail/Saved"} {
		if err := c.Mkdir(ctx, d, 0o700); err != nil {
			return err
		}
		for _, sub := range []string{"tmp", "new", "cur"} {
			if err := c.Mkdir(ctx, d+"/"+sub, 0o700); err != nil && d != "/mail" {
				return err
			}
		}
	}
	m, err := openMaildir(ctx, c)
	if err != nil {
		return err
	}
	msg := imapMessage()
	for i := range n {
		if err := m.write(ctx, c, m.inboxCur, imapMsgName(i), msg, true); err != nil {
			return err
		}
	}
	return c.SyncNamespace(ctx)
}

func imapMessage() []byte {
	msg := make([]byte, imapMessageSize)
	for i := range msg {
		msg[i] = "abcdefghijklmnopqrstuvwxyz\n"[i%27]
	}
	return msg
}

// maildir is the folders a move uses, looked up once, as an IMAP server
// holds its folders' directories open (and as a mount's kernel caches
// their names): each step names its message in a folder, not a path.
type maildir struct{ inboxCur, savedTmp, savedCur core.Ino }

func openMaildir(ctx context.Context, c *client.Client) (maildir, error) {
	var m maildir
	for _, d := range []struct {
		ino  *core.Ino
		path string
	}{{&m.inboxCur, "/mail/INBOX/cur"}, {&m.savedTmp, "/mail/Saved/tmp"}, {&m.savedCur, "/mail/Saved/cur"}} {
		a, err := c.Stat(ctx, d.path)
		if err != nil {
			return m, err
		}
		*d.ino = a.Ino
	}
	return m, nil
}

// write creates name in dir with data, fsynced if sync.
func (m maildir) write(ctx context.Context, c *client.Client, dir core.Ino, name string, data []byte, sync bool) error {
	f, err := c.CreateAt(ctx, dir, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// copy copies message i into Saved as a maildir delivery: written in
// tmp/, then renamed into cur/.
func (m maildir) copy(ctx context.Context, c *client.Client, i int, msg []byte, sync bool) error {
	name := imapMsgName(i)
	if err := m.write(ctx, c, m.savedTmp, name, msg, sync); err != nil {
		return err
	}
	if err := c.RenameAt(ctx, m.savedTmp, name, m.savedCur, name, 0); err != nil {
		return err
	}
	if sync {
		return c.SyncNamespace(ctx)
	}
	return nil
}

// expunge unlinks messages 0..n-1 from INBOX.
func (m maildir) expunge(ctx context.Context, c *client.Client, n int) error {
	for i := range n {
		if err := c.UnlinkAt(ctx, m.inboxCur, imapMsgName(i)); err != nil {
			return err
		}
	}
	return nil
}

func imapMoveFsync(ctx context.Context, c *client.Client, m maildir, n int) error {
	msg := imapMessage()
	for i := range n {
		if err := m.copy(ctx, c, i, msg, true); err != nil {
			return err
		}
	}
	if err := m.expunge(ctx, c, n); err != nil {
		return err
	}
	return c.SyncNamespace(ctx)
}

func imapMovePG(ctx context.Context, c *client.Client, m maildir, n int) error {
	msg := imapMessage()
	copyG := c.NewPatchgroup()
	if err := c.Engage(copyG); err != nil {
		return err
	}
	for i := range n {
		if err := m.copy(ctx, c, i, msg, false); err != nil {
			return err
		}
	}
	if err := c.Disengage(copyG); err != nil {
		return err
	}
	expunge := c.NewPatchgroup()
	if err := expunge.DependOn(copyG); err != nil {
		return err
	}
	if err := c.Engage(expunge); err != nil {
		return err
	}
	if err := m.expunge(ctx, c, n); err != nil {
		return err
	}
	if err := c.Disengage(expunge); err != nil {
		return err
	}
	err := expunge.Sync(ctx)
	return errors.Join(err, copyG.Close(), expunge.Close())
}

func imapMoveUnordered(ctx context.Context, c *client.Client, m maildir, n int) error {
	msg := imapMessage()
	for i := range n {
		if err := m.copy(ctx, c, i, msg, false); err != nil {
			return err
		}
	}
	if err := m.expunge(ctx, c, n); err != nil {
		return err
	}
	return c.SyncNamespace(ctx)
}

// imapLocal runs the move on the local disk: with an fsync of each file
// and directory at every step, or none.
func imapLocal(root string, n int, sync bool) (float64, int64, int64, error) {
	var fsyncs int64
	syncPath := func(p string) error {
		if !sync {
			return nil
		}
		fsyncs++
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		return errors.Join(f.Sync(), f.Close())
	}
	msg := imapMessage()
	for _, d := range []string{"INBOX", "Saved"} {
		for _, sub := range []string{"tmp", "new", "cur"} {
			if err := os.MkdirAll(filepath.Join(root, d, sub), 0o700); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(root, "INBOX", "cur", imapMsgName(i)), msg, 0o600); err != nil {
			return 0, 0, 0, err
		}
	}
	start := time.Now()
	for i := range n {
		name := imapMsgName(i)
		tmp, cur := filepath.Join(root, "Saved", "tmp", name), filepath.Join(root, "Saved", "cur", name)
		if err := os.WriteFile(tmp, msg, 0o600); err != nil {
			return 0, 0, 0, err
		}
		if err := syncPath(tmp); err != nil {
			return 0, 0, 0, err
		}
		if err := os.Rename(tmp, cur); err != nil {
			return 0, 0, 0, err
		}
		if err := syncPath(filepath.Dir(cur)); err != nil {
			return 0, 0, 0, err
		}
	}
	for i := range n {
		if err := os.Remove(filepath.Join(root, "INBOX", "cur", imapMsgName(i))); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := syncPath(filepath.Join(root, "INBOX", "cur")); err != nil {
		return 0, 0, 0, err
	}
	return time.Since(start).Seconds(), fsyncs, -1, nil
}

func imapTables(results []Result) []Table {
	t := Table{
		Title:  "Moving N messages (COPY, then EXPUNGE), median over repeats",
		Header: []string{"configuration", "time (s)", "durable writes", "requests sent"},
	}
	for _, target := range []string{imapFsync, imapPG, imapPGWB, imapPGWBSync, imapUnordered, imapExt4Fsync, imapExt4None} {
		row := []string{target, "", "", ""}
		found := false
		for _, r := range results {
			if r.Target != target || len(r.Samples) == 0 {
				continue
			}
			found = true
			switch r.Case {
			case imapTime:
				row[1] = fmt.Sprintf("%.2f", r.Median())
			case imapSyncs:
				row[2] = fmt.Sprintf("%.0f", r.Median())
			case imapRPCs:
				row[3] = fmt.Sprintf("%.0f", r.Median())
			}
		}
		if found {
			t.Rows = append(t.Rows, row)
		}
	}
	return []Table{t}
}

func imapGoals(results []Result) []string {
	get := func(target, c string) float64 {
		for _, r := range results {
			if r.Target == target && r.Case == c && len(r.Samples) > 0 {
				return r.Median()
			}
		}
		return 0
	}
	fs := get(imapFsync, imapTime)
	var out []string
	for _, target := range []string{imapPG, imapPGWB, imapPGWBSync} {
		pg := get(target, imapTime)
		if fs == 0 || pg == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("imap: %s moves the messages %.1f× faster than fsync per step, with %.0f durable writes against %.0f (goal: ≥ 10× faster, ≥ 20× fewer; the paper: 15×, 26 against 2,531)",
			target, fs/pg, get(target, imapSyncs), get(imapFsync, imapSyncs)))
	}
	return out
}
