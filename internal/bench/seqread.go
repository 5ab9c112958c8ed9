package bench

// seqread: seed 000's figure Read50x, time to read 2^n bytes, n = 1..21, mean
// of 50 runs, weft against sshfs and JuiceFS, on loopback and over the gige
// link; and weft's chunk size sweep through the library.

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/linksim"
)

func seqreadBenchmark() Benchmark {
	return Benchmark{
		Name: "seqread",
		Seed: "seed 000, Ringer's figure \"Read50x\"",
		Doc: "Time to read a whole file of 2^n bytes (open, read, close), n = 1..21, mean of 50 runs, " +
			"on every target over loopback, and over the gige link where the target has a network hop; " +
			"weft's library at a remote site over dsl, directly and through an edge; " +
			"then weft's chunk size swept through the library over gige",
		Notes: []string{
			"Each sample is the mean of 50 reads of the same file (5 with --quick); the table gives the median " +
				"of the repeated samples with their min–max, in ms. FUSE targets read through the kernel, which " +
				"drops a file's pages at each open unless the file system asks to keep them; local and tmpfs are " +
				"read from the page cache, as a user would. \"over gige\" puts the link between the client and " +
				"the server: sshfs ↔ sshd, JuiceFS ↔ Redis (its objects stay on the local disk: only metadata " +
				"crosses the link), weft's library ↔ meta and store servers. The weft FUSE mount runs its servers " +
				"in the mounting process, so it has no link row.",
			"The dsl rows put a reader at a remote site (issue 17), every fourth size: \"over dsl\" has the " +
				"library's meta and store traffic cross the link; \"via edge\" has an edge meta server " +
				"(internal/edge) next to the client, its upstream traffic and the client's store traffic " +
				"across the link; \"no chunk cache\" is the same with the client's chunk cache off " +
				"(client/chunkcache.go), so every read fetches its chunks across the link.",
		},
		Run:     runSeqread,
		Tables:  seqreadTables,
		Paper:   []Table{paperSeqread},
		Figures: seqreadFigures,
	}
}

const sweepPrefix = "chunk "

func seqreadSizes(quick bool) []int {
	var ns []int
	for n := 1; n <= 21; n++ {
		if !quick || n%4 == 1 {
			ns = append(ns, n)
		}
	}
	return ns
}

func runSeqread(ctx context.Context, env *Env) ([]Result, error) {
	runs := 50
	if env.Quick {
		runs = 5
	}
	ns := seqreadSizes(env.Quick)
	reps := env.repeats()
	targets := env.targets()
	linked := filterTargets(targets, kindSSHFS, kindJuiceFSRedis)
	chunks := []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}
	if env.Quick {
		chunks = []int64{64 << 10, 4 << 20}
	}
	remote := seqreadRemotes()
	env.progress(len(targets) + len(linked) + 2 + len(remote) + len(chunks) + 4)

	var out []Result
	measureSizes := func(name string, open opener, ns []int) error {
		for _, n := range ns {
			if err := writeRandom(open, fileName(n), 1<<n); err != nil {
				return err
			}
		}
		for _, n := range ns {
			r := Result{Bench: "seqread", Case: fmt.Sprintf("2^%d B", n), Target: name, Unit: "ms", X: float64(int64(1) << n)}
			for range reps {
				mean, err := meanRead(ctx, open, fileName(n), runs)
				if err != nil {
					return err
				}
				r.Samples = append(r.Samples, mean)
			}
			out = append(out, r)
		}
		return nil
	}
	measure := func(name string, open opener) error { return measureSizes(name, open, ns) }
	for _, link := range []*linksim.Profile{nil, &linksim.GigE} {
		ts := targets
		suffix := ""
		if link != nil {
			ts, suffix = linked, " over gige"
		}
		err := env.eachTarget(ctx, ts, link, func(m *Mount) error {
			env.step("reading " + m.Target.Name + suffix)
			return measure(m.Target.Name+suffix, dirOpener(m.Dir))
		})
		if err != nil {
			return nil, err
		}
		env.step("weft library" + suffix)
		if err := seqreadLib(ctx, env, link, libOptions{}, func(o opener) error { return measure("weft (library)"+suffix, o) }); err != nil {
			env.skip("weft (library)"+suffix, err)
		}
	}

	// The seed's setting: a reader at a remote site, over dsl.
	for _, r := range remote {
		env.step(r.name)
		err := env.withLibCluster(ctx, libOptions{}, func(lc *libCluster) error {
			c, err := r.client(ctx, lc)
			if err != nil {
				return err
			}
			defer c.Close()
			return measureSizes(r.name, libOpener(ctx, c), seqreadRemoteSizes(env.Quick))
		})
		if err != nil {
			env.skip(r.name, err)
		}
	}

	// The chunk size sweep: bigger reads, through the library, over gige.
	sweep := []int{12, 16, 20, 22, 24}
	sweepRuns := 10
	if env.Quick {
		sweep, sweepRuns = []int{12, 20}, 3
	}
	for _, cs := range chunks {
		env.step(fmt.Sprintf("chunk size %s", sizeLabel(float64(cs))))
		err := seqreadLib(ctx, env, &linksim.GigE, libOptions{ChunkSize: cs}, func(o opener) error {
			for _, n := range sweep {
				if err := writeRandom(o, fileName(n), 1<<n); err != nil {
					return err
				}
				r := Result{Bench: "seqread", Case: fmt.Sprintf("2^%d B", n), Target: sweepPrefix + sizeLabel(float64(cs)) + "B",
					Unit: "ms", X: float64(int64(1) << n)}
				for range reps {
					mean, err := meanRead(ctx, o, fileName(n), sweepRuns)
					if err != nil {
						return err
					}
					r.Samples = append(r.Samples, mean)
				}
				out = append(out, r)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("chunk size %d: %w", cs, err)
		}
	}
	return out, nil
}

func fileName(n int) string { return fmt.Sprintf("read-2^%02d", n) }

// filterTargets keeps the targets of the given kinds.
func filterTargets(ts []Target, kinds ...string) []Target {
	var out []Target
	for _, t := range ts {
		for _, k := range kinds {
			if t.Kind == k {
				out = append(out, t)
			}
		}
	}
	return out
}

// opener abstracts where the benchmark's files live: a directory of a mount,
// or weft's library.
type opener struct {
	open   func(name string) (io.ReadCloser, error)
	create func(name string) (io.WriteCloser, error)
}

func dirOpener(dir string) opener {
	return opener{
		open: func(name string) (io.ReadCloser, error) { return os.Open(filepath.Join(dir, name)) },
		create: func(name string) (io.WriteCloser, error) {
			return os.Create(filepath.Join(dir, name))
		},
	}
}

// seqreadLib runs fn with an opener on an in-process weft cluster, its
// client behind link.
func seqreadLib(ctx context.Context, env *Env, link *linksim.Profile, o libOptions, fn func(opener) error) error {
	return env.withLib(ctx, link, o, func(c *linkedClient) error { return fn(libOpener(ctx, c)) })
}

// libOpener opens files of c's root directory.
func libOpener(ctx context.Context, c *linkedClient) opener {
	return opener{
		open: func(name string) (io.ReadCloser, error) { return c.Open(ctx, "/"+name, os.O_RDONLY, 0) },
		create: func(name string) (io.WriteCloser, error) {
			return c.Open(ctx, "/"+name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		},
	}
}

// seqreadRemote is a weft client at a remote site, the cluster across a
// dsl link (issue 17): what the edge and the client's chunk cache change
// for Read50x.
type seqreadRemote struct {
	name   string
	client func(context.Context, *libCluster) (*linkedClient, error)
}

// The remote rows' names.
const (
	remoteDirect  = "weft (library) over dsl"
	remoteEdge    = "weft (library) via edge, data over dsl"
	remoteNoCache = "weft (library) via edge, data over dsl, no chunk cache"
)

func seqreadRemotes() []seqreadRemote {
	noCache := func(cc *client.Config) { cc.ReadCache = -1 }
	return []seqreadRemote{
		{remoteDirect, func(_ context.Context, lc *libCluster) (*linkedClient, error) {
			return lc.client(&linksim.DSL, true)
		}},
		{remoteEdge, func(ctx context.Context, lc *libCluster) (*linkedClient, error) {
			return lc.edgeClient(ctx, linksim.DSL, false, true, nil)
		}},
		{remoteNoCache, func(ctx context.Context, lc *libCluster) (*linkedClient, error) {
			return lc.edgeClient(ctx, linksim.DSL, false, true, noCache)
		}},
	}
}

// seqreadRemoteSizes are the sizes read over dsl: every fourth n, as
// --quick has everywhere (a 2 MiB read takes 2 s at dsl's 8 Mbit/s, 50
// times over without a cache); --quick keeps two small ones.
func seqreadRemoteSizes(quick bool) []int {
	if quick {
		return []int{1, 9}
	}
	return seqreadSizes(true)
}

func writeRandom(o opener, name string, size int64) error {
	f, err := o.create(name)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readBuf is the read size of every whole-file read: large enough that a
// read is one request on every target.
const readBuf = 1 << 20

// meanRead returns the mean time in ms of runs whole reads of name.
func meanRead(ctx context.Context, o opener, name string, runs int) (float64, error) {
	buf := make([]byte, readBuf)
	var total time.Duration
	for range runs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		start := time.Now()
		f, err := o.open(name)
		if err != nil {
			return 0, err
		}
		for {
			_, err = f.Read(buf)
			if err != nil {
				break
			}
		}
		if err != io.EOF {
			f.Close()
			return 0, err
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
		total += time.Since(start)
	}
	return float64(total) / float64(runs) / float64(time.Millisecond), nil
}

func seqreadTables(rs []Result) []Table {
	main := filter(rs, func(r Result) bool { return !strings.HasPrefix(r.Target, sweepPrefix) })
	sweep := filter(rs, func(r Result) bool { return strings.HasPrefix(r.Target, sweepPrefix) })
	t1 := pivot(main, "bytes read", byCase, byTarget, nil, nil)
	t1.Title = "Time to read 2^n bytes, ms (median of the 50-run means, min–max):"
	t2 := pivot(sweep, "chunk size", byTarget, byCase, nil, nil)
	t2.Title = "weft's chunk size over the gige link, through the library: time to read 2^n bytes, ms:"
	return []Table{t1, t2}
}

func seqreadFigures(rs []Result) []Figure {
	main := filter(rs, func(r Result) bool { return !strings.HasPrefix(r.Target, sweepPrefix) })
	sweep := filter(rs, func(r Result) bool { return strings.HasPrefix(r.Target, sweepPrefix) })
	f1 := lineFigure("seqread", "Read50x: time to read 2^n bytes (mean of 50 runs)", "bytes read", "ms", main, byTarget)
	f1.LogX, f1.LogY = true, true
	f2 := lineFigure("seqread-chunks", "weft chunk size over gige (library)", "bytes read", "ms", sweep, byTarget)
	f2.LogX, f2.LogY = true, true
	return []Figure{f1, f2}
}
