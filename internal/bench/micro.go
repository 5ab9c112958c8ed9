package bench

// micro: seed 000's metadata micro-benchmarks through weft's library, over
// loopback and over the gige and dsl links in front of the meta server.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/linksim"
)

// The micro rows, named as in the paper.
const (
	opGetRnode  = "get_rnode() — getattr"
	opPutRnode  = "put_rnode() — setattr"
	opOpenClose = "open + close"
	opPing      = "64 B ping through the link (no server work)"
)

// microColumns are the table's columns: the link between client and meta
// server.
var microColumns = []struct {
	name string
	link *linksim.Profile
}{
	{"local", nil},
	{"gige", &linksim.GigE},
	{"dsl", &linksim.DSL},
	{mixedColumn, &linksim.DSL},
}

func microBenchmark() Benchmark {
	return Benchmark{
		Name: "micro",
		Seed: "seed 000, Ringer's table \"Metadata Micro-benchmarks\"",
		Doc: "Latency of metadata calls through weft's client library: getattr (get_rnode), " +
			"setattr (put_rnode), open+close; client to meta server over loopback, and over the " +
			"injected gige and dsl links",
		Notes: []string{
			"One in-process cluster (one meta, one store server; sync durability, Pebble on the local disk). " +
				"Each sample is the mean (or p99) over a series of calls on one file: 1,000 calls per series on local " +
				"and gige, 300 on dsl (a series there takes ~30 ms a call); the table gives the median over the " +
				"repeated series with their min–max, in µs. The link sits between the client and the meta server " +
				"(package linksim: gige ≈ 0.1 ms round trip, 1 Gbit/s; dsl ≈ 30 ms, 1 Mbit/s up, 8 Mbit/s down); " +
				"its own round trip is the last row.",
			"mixed (dsl): the client talks to an edge meta server (weft edge) on loopback, the edge to the meta " +
				"server across the dsl link; getattr of a file read before is answered from the edge's cache under " +
				"its upstream read lease, and a read lease is granted by the edge while it holds the upstream one. " +
				"Lease rows time the wire calls: an acquire (a call) and its release (one-way, timed until it is " +
				"handed to the connection). The first acquire of each series has its own row (through the edge it takes " +
				"the upstream lease across the link); the series' rows time the acquires after it. A write lease " +
				"through the edge is delegated: granted by the edge on a write lease it holds upstream.",
			"The edge runs in write-back mode (weft edge --durability writeback): a setattr (put_rnode) of a file it " +
				"learnt the attributes of, under a write lease it holds upstream, is completed at the edge and sent " +
				"upstream within 1 s, at fsync or at a recall. put_rnode and get_rnode time the calls after an untimed " +
				"first one on the file, in every column.",
		},
		Run:     runMicro,
		Tables:  microTables,
		Paper:   []Table{paperMicro},
		Figures: microFigures,
	}
}

func runMicro(ctx context.Context, env *Env) ([]Result, error) {
	runs := map[string]int{"local": 1000, "gige": 1000, "dsl": 300, mixedColumn: 300}
	if env.Quick {
		runs = map[string]int{"local": 200, "gige": 200, "dsl": 20, mixedColumn: 20}
	}
	reps := env.repeats()
	env.progress(len(microColumns) * reps)
	lc, err := startLib(ctx, env.Dir, libOptions{})
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	direct, err := lc.client(nil, false)
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	d, err := direct.MkdirAt(ctx, core.RootIno, "micro", 0o755)
	if err != nil {
		return nil, err
	}
	f, err := direct.CreateAt(ctx, d.Ino, "file", os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	ref := f.Ref()
	if err := f.Close(); err != nil {
		return nil, err
	}
	missRefs, err := microFiles(ctx, direct.Client, d.Ino, runs["local"])
	if err != nil {
		return nil, err
	}

	var out []Result
	ops := []string{opGetRnode, opPutRnode, opOpenClose}
	leaseOps := []string{opGetRnodeMiss, opGetReadFirst, opGetRead, opEndRead, opGetWriteFirst, opGetWrite, opEndWrite}
	for _, col := range microColumns {
		c, err := microClient(ctx, lc, col.name, col.link)
		if err != nil {
			return nil, err
		}
		res := map[string]*Result{}
		for _, op := range append(append(ops, leaseOps...), opPing) {
			for _, stat := range []string{"mean", "p99"} {
				k := col.name + " " + stat
				res[op+k] = &Result{Bench: "micro", Case: op, Target: k, Unit: "µs"}
			}
		}
		n := runs[col.name]
		for r := range reps {
			env.step(fmt.Sprintf("%s, series %d", col.name, r+1))
			for _, op := range ops {
				lat, err := microSeries(ctx, c.Client, ref, op, n)
				if err != nil {
					c.Close()
					return nil, fmt.Errorf("%s over %s: %w", op, col.name, err)
				}
				mean, p99 := meanP99(lat)
				res[op+col.name+" mean"].Samples = append(res[op+col.name+" mean"].Samples, mean)
				res[op+col.name+" p99"].Samples = append(res[op+col.name+" p99"].Samples, p99)
			}
			if err := microLeaseRows(ctx, c, ref, missRefs[:n], col.name, res); err != nil {
				c.Close()
				return nil, err
			}
		}
		c.Close()
		if col.link != nil {
			for range reps {
				rtt, err := linksim.RoundTrip(*col.link, min(n, 100))
				if err != nil {
					return nil, err
				}
				res[opPing+col.name+" mean"].Samples = append(res[opPing+col.name+" mean"].Samples, us(rtt))
			}
		}
		for _, op := range append(append(ops, leaseOps...), opPing) {
			for _, stat := range []string{"mean", "p99"} {
				if r := res[op+col.name+" "+stat]; len(r.Samples) > 0 {
					out = append(out, *r)
				}
			}
		}
	}
	return out, nil
}

// microSeries times n calls of op on the file ref names.
func microSeries(ctx context.Context, c *client.Client, ref client.Ref, op string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	switch op {
	case opGetRnode:
		// Untimed: the row is a getattr of a file read before (an edge
		// answers it from its cache); first accesses have their own row.
		if _, err := c.GetAttr(ctx, ref); err != nil {
			return nil, err
		}
	case opPutRnode:
		// Untimed: the row is a setattr of a file changed before (a
		// write-back edge learns the file's attributes from the first
		// and completes the next ones itself).
		mode := uint32(0o600)
		if _, err := c.SetAttr(ctx, ref, client.SetAttr{Mode: &mode}); err != nil {
			return nil, err
		}
	}
	for i := range n {
		start := time.Now()
		var err error
		switch op {
		case opGetRnode:
			_, err = c.GetAttr(ctx, ref)
		case opPutRnode:
			mode := uint32(0o600 | i%2*0o044)
			_, err = c.SetAttr(ctx, ref, client.SetAttr{Mode: &mode})
		case opOpenClose:
			var f *client.File
			if f, err = c.OpenRef(ctx, ref, os.O_RDONLY); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

func meanP99(lat []time.Duration) (mean, p99 float64) {
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return us(sum / time.Duration(len(lat))), us(s[min(len(s)-1, len(s)*99/100)])
}

func microTables(rs []Result) []Table {
	cols := []string{"local mean", "local p99", "gige mean", "gige p99", "dsl mean", "dsl p99", mixedColumn + " mean", mixedColumn + " p99"}
	t := pivot(rs, "test (µs)", byCase, byTarget, nil, cols)
	t.Title = "weft, µs (median over series, min–max):"
	return []Table{t}
}

func microFigures(rs []Result) []Figure {
	ms := filter(rs, func(r Result) bool {
		return len(r.Samples) > 0 && r.Case != opPing && len(r.Target) > 5 && r.Target[len(r.Target)-4:] == "mean"
	})
	f := barFigure("micro", "Metadata calls through the library, mean latency", "µs (log)", ms, byCase, byTarget)
	f.LogY = true
	return []Figure{f}
}
