package bench

// The repair benchmark: how long a cluster takes to hold R copies of every
// chunk again after a store's disk is replaced (issue 12: "the time to
// restore R=2 for 1 GiB after a store comes back empty").

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// GroupOps names the operational benchmarks (repair): each writes a data
// set of its own and takes minutes, more than "all" may.
const GroupOps = "ops"

// Targets of the repair benchmark.
const (
	repairPass       = "weft repair (one process, no rate limit)"
	repairBackground = "background repair (the store alone, 64 MiB/s default rate)"
)

const (
	repairStores      = 3
	repairReplication = 2
	repairFiles       = 16
	// repairWait bounds one restore: a pass that never comes clean, or a
	// store that never says it is complete, fails the benchmark.
	repairWait = 15 * time.Minute
)

func repairBenchmark() Benchmark {
	return Benchmark{
		Name:  "repair",
		Group: GroupOps,
		Doc: "time to restore R=2 after a store comes back empty (a replaced disk): 1 meta and " +
			"3 store processes, 1 GiB in 16 files, one store killed, its data directory deleted, restarted",
		Notes: []string{
			"Each repeat empties the next store (0, 1, 2, ...) of the same cluster: kill -9, delete its data directory, restart.",
			"\"" + repairPass + "\": repair.Run over every store (what `weft repair` does: Only -1, no --verify, RateBytes 0) " +
				"from the restart until a pass is clean, timed alone. The restarted store's own background pass runs meanwhile, " +
				"as it does in a real cluster; copies it makes first count as raced in the timed pass.",
			"\"" + repairBackground + "\": no `weft repair`; from the restart command until the store reports itself complete " +
				"(its background pass, rate-limited, left nothing behind). Includes the process start.",
			"MB/s is the bytes the store held before its disk was lost (its ListChunks sizes), restored per second. " +
				"After every restore the store must list the same bytes again, a verifying dry-run pass must find every " +
				"copy present and sound, and every file must read back as written through a new client.",
		},
		Run: runRepairBenchmark,
		Goals: func(rs []Result) []string {
			var out []string
			for _, r := range rs {
				if r.Unit == "s" && r.Target == repairPass {
					out = append(out, fmt.Sprintf("weft repair restored the emptied store (%s) in %.1f s (median; no goal set)",
						strings.TrimSuffix(r.Case, ": time"), r.Median()))
				}
			}
			return out
		},
	}
}

// repairSet is the data the benchmark writes: files of pseudo-random bytes
// that can be generated again to check a read without keeping them.
type repairSet struct {
	files int
	size  int64
}

func (s repairSet) name(i int) string { return fmt.Sprintf("/repair-%02d", i) }

// stream returns file i's bytes.
func (s repairSet) stream(i int) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{byte(i), 'w', 'e', 'f', 't'}), s.size)
}

func runRepairBenchmark(ctx context.Context, env *Env) ([]Result, error) {
	bin := upBinary(env)
	if bin == "" {
		return nil, errs.New(errs.Invalid, "repair", "needs a weft binary for the server processes (Options.Weft)")
	}
	total := env.RepairBytes
	if total <= 0 {
		total = 1 << 30
		if env.Quick {
			total = 64 << 20
		}
	}
	set := repairSet{files: repairFiles, size: max(total/repairFiles, 1)}
	p, err := cluster.StartProcs(ctx, cluster.ProcsOptions{
		Binary: bin, Dir: filepath.Join(env.Dir, "cluster"), Meta: 1, Store: repairStores,
		Replication: repairReplication, Backend: "disk",
	})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	if v := commandVersion(bin, "version"); v != "" {
		env.run.version("weft", v)
	}
	cfg := p.Config()
	dial, err := cluster.DialOptions(cfg, "")
	if err != nil {
		return nil, err
	}
	peers := make([]*rpc.Peer, len(cfg.Store))
	stores := make([]repair.Store, len(cfg.Store))
	for i, s := range cfg.Store {
		peers[i] = rpc.NewPeer(s.Addr, dial)
		defer peers[i].Close()
		stores[i] = peers[i]
	}
	env.progress(1 + 2*env.repeats())
	env.step("write")
	if err := writeRepairSet(ctx, cluster.ClientConfig(cfg, core.Root, nil), set); err != nil {
		return nil, err
	}

	label := fmt.Sprintf("%d MiB in %d files, R=%d, %d stores", int64(set.files)*set.size>>20, set.files, repairReplication, repairStores)
	res := map[string]*[2]Result{}
	for _, t := range []string{repairPass, repairBackground} {
		res[t] = &[2]Result{
			{Bench: "repair", Case: label + ": time", Target: t, Unit: "s"},
			{Bench: "repair", Case: label + ": rate", Target: t, Unit: "MB/s"},
		}
	}
	r := restorer{p: p, peers: peers, stores: stores, cc: cluster.ClientConfig(cfg, core.Root, nil), set: set, log: env.Log}
	emptied := 0
	for range env.repeats() {
		for _, t := range []string{repairPass, repairBackground} {
			env.step(t)
			store := emptied % repairStores
			emptied++
			secs, held, err := r.restore(ctx, store, t == repairPass)
			if err != nil {
				return nil, fmt.Errorf("%s, store %d: %w", t, store, err)
			}
			res[t][0].Samples = append(res[t][0].Samples, secs)
			res[t][1].Samples = append(res[t][1].Samples, float64(held)/1e6/secs)
		}
	}
	var out []Result
	for _, t := range []string{repairPass, repairBackground} {
		out = append(out, res[t][0], res[t][1])
	}
	return out, nil
}

func writeRepairSet(ctx context.Context, cc client.Config, set repairSet) error {
	c, err := client.New(cc)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := range set.files {
		if _, err := c.WriteFrom(ctx, set.name(i), set.stream(i), 0o644, nil); err != nil {
			return err
		}
	}
	return nil
}

// restorer empties one store of a running cluster and times its restore.
type restorer struct {
	p      *cluster.Procs
	peers  []*rpc.Peer
	stores []repair.Store
	cc     client.Config
	set    repairSet
	log    *slog.Logger
}

// restore replaces store s's disk and returns the seconds until R copies
// are back (by `weft repair` passes, or by the store's own background
// repair) and the bytes the store held before, after checking that they are.
func (r *restorer) restore(ctx context.Context, s int, byPass bool) (float64, int64, error) {
	held, err := heldBytes(ctx, r.peers[s])
	if err != nil {
		return 0, 0, err
	}
	if held == 0 {
		return 0, 0, errs.New(errs.Invalid, "repair", "store %d holds no chunks: nothing to restore", s)
	}
	if err := r.p.Kill(cluster.RoleStore, s); err != nil {
		return 0, 0, err
	}
	if err := os.RemoveAll(r.p.Config().Store[s].Dir); err != nil {
		return 0, 0, err
	}
	began := time.Now()
	if err := r.p.Restart(ctx, cluster.RoleStore, s); err != nil {
		return 0, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, repairWait)
	defer cancel()
	if byPass {
		began = time.Now()
		err = r.passUntilClean(wctx)
	} else {
		err = waitComplete(wctx, r.peers[s])
	}
	secs := time.Since(began).Seconds()
	if err != nil {
		return 0, 0, err
	}
	r.log.Info("repair: store restored", "store", s, "bytes", held, "seconds", secs, "by_pass", byPass)
	if err := r.check(ctx, s, held); err != nil {
		return 0, 0, fmt.Errorf("after the restore: %w", err)
	}
	return secs, held, nil
}

// passUntilClean runs unthrottled passes over every store until one leaves
// every chunk on its replicas.
func (r *restorer) passUntilClean(ctx context.Context) error {
	for {
		rep, err := repair.Run(ctx, repair.Config{Stores: r.stores, Replication: repairReplication, Only: -1, RateBytes: 0,
			Capability: cluster.AdminCapability(r.p.Config(), auth.Read|auth.Write)})
		if err != nil {
			return err
		}
		if rep.Clean() {
			return nil
		}
		r.log.Info("repair: pass left work", "report", rep.String())
	}
}

// waitComplete polls store s until it says it holds every chunk placed on
// it again.
func waitComplete(ctx context.Context, s *rpc.Peer) error {
	for {
		var st weftpb.StoreStatFSReply
		if err := s.Call(ctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &st); err != nil {
			return err
		}
		if !st.GetIncomplete() {
			return nil
		}
		select {
		case <-ctx.Done():
			return errs.Wrap(errs.Timeout, "repair", "waiting for the store to be complete", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check makes sure the restore measured a restore: store s lists the bytes
// it held before, every placed copy is present and passes its checksums,
// and every file reads back as written.
func (r *restorer) check(ctx context.Context, s int, held int64) error {
	now, err := heldBytes(ctx, r.peers[s])
	if err != nil {
		return err
	}
	if now != held {
		return errs.New(errs.Lost, "repair", "store %d lists %d bytes of chunks, held %d before", s, now, held)
	}
	rep, err := repair.Run(ctx, repair.Config{Stores: r.stores, Replication: repairReplication, Only: -1, DryRun: true, Verify: true,
		Capability: cluster.AdminCapability(r.p.Config(), auth.Read)})
	if err != nil {
		return err
	}
	if rep.UnderReplicated > 0 || len(rep.Unreachable) > 0 {
		return errs.New(errs.Lost, "repair", "a verifying pass found copies to make: %v", rep)
	}
	c, err := client.New(r.cc)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := range r.set.files {
		w := &compareWriter{want: r.set.stream(i)}
		n, err := c.ReadTo(ctx, r.set.name(i), w, nil)
		if err == nil && n != r.set.size {
			err = errs.New(errs.Lost, "read", "%d bytes, wrote %d", n, r.set.size)
		}
		if err == nil {
			err = w.err
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.set.name(i), err)
		}
	}
	return nil
}

// heldBytes sums the sizes of the chunks a store lists.
func heldBytes(ctx context.Context, s *rpc.Peer) (int64, error) {
	var total int64
	var after *weftpb.ChunkID
	for {
		var reply weftpb.ListChunksReply
		if err := s.Call(ctx, weftpb.MethodListChunks, &weftpb.ListChunksRequest{After: after, Limit: 1000}, &reply); err != nil {
			return 0, err
		}
		for _, c := range reply.GetChunks() {
			total += c.GetSize()
			after = c.GetChunk()
		}
		if !reply.GetMore() || len(reply.GetChunks()) == 0 {
			return total, nil
		}
	}
}

// compareWriter checks what is written to it against want; err is the
// first difference.
type compareWriter struct {
	want io.Reader
	off  int64
	buf  []byte
	err  error
}

func (w *compareWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if cap(w.buf) < len(p) {
		w.buf = make([]byte, len(p))
	}
	b := w.buf[:len(p)]
	if _, err := io.ReadFull(w.want, b); err != nil {
		w.err = errs.New(errs.Invalid, "read", "more bytes than written (past %d)", w.off)
		return 0, w.err
	}
	if !bytes.Equal(b, p) {
		i := 0
		for b[i] == p[i] {
			i++
		}
		w.err = errs.New(errs.Corrupt, "read", "byte %d differs from what was written", w.off+int64(i))
		return 0, w.err
	}
	w.off += int64(len(p))
	return len(p), nil
}
