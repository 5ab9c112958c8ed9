package bench

// The security benchmark: what each security mode costs on the data path
// and on the metadata operations that revoke capabilities (issue 13, after
// seed 001's secure vs non-secure comparison).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/linksim"
)

// securityMode is one column of the security benchmark: a mode, and for
// secure whether loopback connections keep the record layer.
type securityMode struct {
	name, mode string
	records    bool
}

var securityModes = []securityMode{
	{config.SecurityNone, config.SecurityNone, false},
	{config.SecuritySecure, config.SecuritySecure, false},
	// What secure costs where the record layer runs: between machines,
	// and on loopback before the bare path.
	{securityRecords, config.SecuritySecure, true},
	{config.SecurityPrivate, config.SecurityPrivate, false},
}

// securityRecords names secure mode with records_on_loopback.
const securityRecords = "secure, records on loopback"

// Cases of the security benchmark.
const (
	secPut         = "put over TCP (sync: durable at close)"
	secGet         = "get over TCP"
	secPutGigE     = "put over an emulated GigE link (sync)"
	secGetGigE     = "get over an emulated GigE link"
	secChmodRevoke = "chmod that revokes (clears a permission bit)"
	secChmodKeep   = "chmod that does not revoke (adds a bit)"
)

// securityChmods is how many chmods of each kind one repeat times.
const securityChmods = 200

func securityBenchmark() Benchmark {
	return Benchmark{
		Name: "security",
		Doc: "the cost of each security mode: sequential put and get of one file through the library over " +
			"loopback TCP, and the latency of a chmod that revokes capabilities against one that does not",
		Notes: []string{
			"Each mode runs its own cluster as separate processes (weft cluster start: one meta and one disk store " +
				"server, sync durability); the benchmark is the client, with the cluster's admin identity and the " +
				"same-host path off, so that every byte crosses a connection in the mode under test.",
			"secure: over loopback the connections carry frames bare after the mutual TLS handshake (the kernel " +
				"keeps other users off a loopback connection); \"" + securityRecords + "\" keeps the integrity record " +
				"layer there too (records_on_loopback = true), as every connection between machines has it. The GigE " +
				"rows go through a relay (linksim), so every secure column has the record layer there.",
			"The GigE rows put every connection of the client (to the meta and the store server) through linksim's " +
				"GigE profile (1 Gbit/s each way, 0.1 ms round trip), as between machines: the crypto then runs while the " +
				"link, not the CPU, sets the pace. 256 MiB (--quick: 16 MiB).",
			fmt.Sprintf("chmod: %d of each kind per repeat on one file, alternating 0644 → 0600 (clears bits: the meta server "+
				"raises the file's generation and tells every store before it answers) and 0600 → 0644 (adds bits: "+
				"no revocation); mean µs per call.", securityChmods),
		},
		Run:    runSecurity,
		Tables: securityTables,
		Goals:  securityGoals,
	}
}

func runSecurity(ctx context.Context, env *Env) ([]Result, error) {
	bin := upBinary(env)
	if bin == "" {
		return nil, errs.New(errs.Unavailable, "bench security", "needs a weft binary to run the servers (--weft)")
	}
	size := int64(1 << 30)
	if env.Quick {
		size = 64 << 20
	}
	src := filepath.Join(env.Dir, "security-source")
	if err := randomFile(src, size); err != nil {
		return nil, err
	}
	defer os.Remove(src)
	reps := env.repeats()
	env.progress(len(securityModes) * (1 + 2*reps))
	// Every mode's cluster runs from the start, and each repeat measures
	// every mode in turn, starting one mode later than the last: on a
	// shared machine the load drifts over a run, and interleaving spreads
	// the drift (and whatever a mode leaves behind for the next) over the
	// modes instead of charging it to whichever ran last.
	var runs []*securityRun
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	for _, mode := range securityModes {
		env.step("cluster " + mode.name)
		r, err := startSecurityRun(ctx, env, bin, mode, size)
		if err != nil {
			env.skip("security "+mode.name, err)
			continue
		}
		runs = append(runs, r)
	}
	dst := filepath.Join(env.Dir, "security-copy")
	defer os.Remove(dst)
	for rep := range reps {
		for j := range runs {
			r := runs[(rep+j)%len(runs)]
			if r.err != nil {
				continue
			}
			env.step(r.put.Target + ": put and get")
			r.err = r.repeat(ctx, src, dst, size)
		}
	}
	var out []Result
	for _, r := range runs {
		if r.err == nil {
			putL := Result{Bench: "security", Case: secPutGigE, Target: r.put.Target, Unit: "MB/s"}
			getL := Result{Bench: "security", Case: secGetGigE, Target: r.put.Target, Unit: "MB/s"}
			r.err = securityOverLink(ctx, env, r.cc, src, dst, size, reps, &putL, &getL)
			if r.err == nil {
				r.err = r.c.Unlink(ctx, securityFile)
			}
			if r.err == nil {
				out = append(out, r.put, r.get, putL, getL, r.revoke, r.keep)
			}
		}
		if r.err != nil {
			env.skip("security "+r.mode.name, r.err)
		}
	}
	return out, nil
}

// securityFile is the file the loopback rows put and get.
const securityFile = "/big"

// securityRun is one mode's cluster, client and results.
type securityRun struct {
	mode                   securityMode
	p                      *cluster.Procs
	cc                     client.Config
	c                      *client.Client
	put, get, revoke, keep Result
	err                    error // the first failure: no more repeats
}

// startSecurityRun starts one mode's cluster of its own and its client.
func startSecurityRun(ctx context.Context, env *Env, bin string, mode securityMode, size int64) (*securityRun, error) {
	dir := "security-" + mode.mode
	if mode.records {
		dir += "-records"
	}
	p, err := cluster.StartProcs(ctx, cluster.ProcsOptions{
		Binary: bin, Dir: filepath.Join(env.Dir, dir), Meta: 1, Store: 1,
		Durability: config.DurabilitySync, Backend: config.BackendDisk, Security: mode.mode,
		RecordsOnLoopback: mode.records,
	})
	if err != nil {
		return nil, err
	}
	cc := cluster.ClientConfig(p.Config(), core.Root, nil)
	cc.NoSameHost = true
	c, err := client.New(cc)
	if err != nil {
		p.Stop()
		return nil, err
	}
	target := "weft (" + mode.name + ")"
	mb := fmt.Sprintf("%d MiB file", size>>20)
	return &securityRun{
		mode: mode, p: p, cc: cc, c: c,
		put:    Result{Bench: "security", Case: secPut + ", " + mb, Target: target, Unit: "MB/s"},
		get:    Result{Bench: "security", Case: secGet + ", " + mb, Target: target, Unit: "MB/s"},
		revoke: Result{Bench: "security", Case: secChmodRevoke, Target: target, Unit: "µs"},
		keep:   Result{Bench: "security", Case: secChmodKeep, Target: target, Unit: "µs"},
	}, nil
}

func (r *securityRun) close() {
	r.c.Close()
	r.p.Stop()
}

// repeat measures one put, one get and the chmods.
func (r *securityRun) repeat(ctx context.Context, src, dst string, size int64) error {
	if err := r.c.Truncate(ctx, securityFile, 0); err != nil && !errs.Is(err, errs.NotExist) {
		return err
	}
	t := time.Now()
	if err := copyIn(ctx, r.c, src, securityFile); err != nil {
		return err
	}
	r.put.Samples = append(r.put.Samples, float64(size)/1e6/time.Since(t).Seconds())
	os.Remove(dst)
	t = time.Now()
	if err := copyOut(ctx, r.c, securityFile, dst); err != nil {
		return err
	}
	r.get.Samples = append(r.get.Samples, float64(size)/1e6/time.Since(t).Seconds())
	// Removed at once, its dirty pages are dropped instead of written
	// back while the next mode puts.
	os.Remove(dst)
	rv, k, err := chmodCosts(ctx, r.c, securityFile)
	if err != nil {
		return err
	}
	r.revoke.Samples = append(r.revoke.Samples, rv)
	r.keep.Samples = append(r.keep.Samples, k)
	return nil
}

// securityOverLink puts and gets the first bytes of src through a client
// whose connections cross an emulated GigE link.
func securityOverLink(ctx context.Context, env *Env, cc client.Config, src, dst string, size int64, reps int, put, get *Result) error {
	size = min(size/4, 256<<20)
	part := src + ".gige"
	if err := copyPrefix(src, part, size); err != nil {
		return err
	}
	defer os.Remove(part)
	var links []*linksim.Link
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	through := func(addrs []string) ([]string, error) {
		var out []string
		for _, a := range addrs {
			l, err := linksim.Listen(a, linksim.GigE, nil)
			if err != nil {
				return nil, err
			}
			links = append(links, l)
			out = append(out, l.Addr())
		}
		return out, nil
	}
	var err error
	if cc.MetaAddrs, err = through(cc.MetaAddrs); err != nil {
		return err
	}
	if cc.StoreAddrs, err = through(cc.StoreAddrs); err != nil {
		return err
	}
	c, err := client.New(cc)
	if err != nil {
		return err
	}
	defer c.Close()
	const name = "/gige"
	for range reps {
		env.step(put.Target + ": put and get over GigE")
		if err := c.Truncate(ctx, name, 0); err != nil && !errs.Is(err, errs.NotExist) {
			return err
		}
		t := time.Now()
		if err := copyIn(ctx, c, part, name); err != nil {
			return err
		}
		put.Samples = append(put.Samples, float64(size)/1e6/time.Since(t).Seconds())
		os.Remove(dst)
		t = time.Now()
		if err := copyOut(ctx, c, name, dst); err != nil {
			return err
		}
		get.Samples = append(get.Samples, float64(size)/1e6/time.Since(t).Seconds())
	}
	return c.Unlink(ctx, name)
}

// copyPrefix writes the first n bytes of src to dst.
func copyPrefix(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, n); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// chmodCosts returns the mean µs of a chmod that clears bits of name's mode
// and of one that sets them again.
func chmodCosts(ctx context.Context, c *client.Client, name string) (revoke, keep float64, err error) {
	var tr, tk time.Duration
	for range securityChmods {
		t := time.Now()
		if err := c.Chmod(ctx, name, 0o600); err != nil {
			return 0, 0, err
		}
		tr += time.Since(t)
		t = time.Now()
		if err := c.Chmod(ctx, name, 0o644); err != nil {
			return 0, 0, err
		}
		tk += time.Since(t)
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / securityChmods }
	return us(tr), us(tk), nil
}

func securityTables(rs []Result) []Table {
	t := pivot(rs, "case", byCase, byTarget, nil, nil)
	t.Title = "Per mode (median over repeats, min–max):"
	return []Table{t}
}

// securityGoals: the issue's ≤ 10% bandwidth cost for secure, as ratios of
// the medians (mode / none).
func securityGoals(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.Unit != "MB/s" || r.Target != "weft ("+config.SecurityNone+")" {
			continue
		}
		out = append(out,
			goalAtLeast(rs, "security "+r.Case, r.Case, "weft ("+config.SecuritySecure+")", r.Target, 0.9, false),
			goalAtLeast(rs, "security "+r.Case, r.Case, "weft ("+config.SecurityPrivate+")", r.Target, 0.85, false))
	}
	return out
}
