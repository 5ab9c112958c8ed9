package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
)

// BenchmarkSeqioRatio is BenchmarkSeqio's pattern (1 MiB records, fsync
// and close after each pass, 4 MiB chunks: files of 1 and 4 MiB are
// partial ec:4+1 stripes) with replicas:2 and ec:4+1 side by side, file by
// file, so that both see the same load on a shared machine, and with the
// read pass too. It reports each mode's median MB/s over the b.N files and
// the ratio of the medians (ec:4+1 / replicas:2) per pass.
func BenchmarkSeqioRatio(b *testing.B) {
	for _, size := range []int64{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			clients := []*client.Client{
				newECCluster(b, "replicas:2", 5).client(4 << 20),
				newECCluster(b, "ec:4+1", 5).client(4 << 20),
			}
			ctx := context.Background()
			rec := make([]byte, 1<<20)
			for i := range rec {
				rec[i] = byte(i * 7)
			}
			write := func(c *client.Client, name string, flags int) {
				f, err := c.Open(ctx, name, flags, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				for done := int64(0); done < size; done += int64(len(rec)) {
					if _, err := f.Write(rec); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
			read := func(c *client.Client, name string) {
				f, err := c.Open(ctx, name, os.O_RDONLY, 0)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, f)
				if err != nil || n != size {
					b.Fatalf("read %d bytes (%v), want %d", n, err, size)
				}
				f.Close()
			}
			for _, c := range clients { // past the stores' first second (no stripe locks)
				write(c, "/warm", os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
			}
			passes := []string{"write", "rewrite", "read"}
			rates := make([][][]float64, len(clients)) // [mode][pass][file]
			for m := range rates {
				rates[m] = make([][]float64, len(passes))
			}
			timed := func(m, p int, f func()) {
				start := time.Now()
				f()
				rates[m][p] = append(rates[m][p], float64(size)/1e6/time.Since(start).Seconds())
			}
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("/f%d", i)
				for m, c := range clients {
					timed(m, 0, func() { write(c, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC) })
					timed(m, 1, func() { write(c, name, os.O_WRONLY) })
					timed(m, 2, func() { read(c, name) })
					if err := c.Unlink(ctx, name); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			median := func(xs []float64) float64 {
				s := slices.Clone(xs)
				slices.Sort(s)
				return s[len(s)/2]
			}
			for p, pass := range passes {
				rep, ec := median(rates[0][p]), median(rates[1][p])
				b.ReportMetric(rep, pass+"-rep-MB/s")
				b.ReportMetric(ec, pass+"-ec-MB/s")
				b.ReportMetric(ec/rep, pass+"-ratio")
			}
		})
	}
}

// BenchmarkSmallFlushedWrite is one 4 KiB write into a written ec:4+1
// stripe, pushed to the stores by a flush, with and without the parity
// cache: what each small synchronous write pays (the stripe lock, k-1
// reads and 1+m writes without the cache; one write under a frame).
func BenchmarkSmallFlushedWrite(b *testing.B) {
	for _, tc := range []struct {
		name   string
		frames int
	}{{"cache", 0}, {"no-cache", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			ec := newECCluster(b, "ec:4+1", 5)
			c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrames = tc.frames })
			ctx := context.Background()
			f, err := c.Create(ctx, "/f", 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, 4*ecChunk)); err != nil {
				b.Fatal(err)
			}
			// Past the stores' first second, in which they grant no
			// stripe lock (store/stripelock.go).
			if err := f.Flush(); err != nil {
				b.Fatal(err)
			}
			p := make([]byte, 4096)
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.WriteAt(p, int64(i%64)*4096); err != nil {
					b.Fatal(err)
				}
				if err := f.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShrinkTruncate times a truncate of an ec:4+1 file of one
// stripe (four 64 KiB data units, mem stores) into its second data unit,
// through the open file and by path (a client that does not know the
// file's size), and a truncate by path that grows the file. Between two
// shrinks the file is written whole again, untimed. It reports the store
// transfers each truncate costs.
func BenchmarkShrinkTruncate(b *testing.B) {
	for _, mode := range []string{"shrink open", "shrink path", "grow path"} {
		b.Run(mode, func(b *testing.B) {
			ec := newECCluster(b, "ec:4+1", 5)
			c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrames = -1 })
			ctx := context.Background()
			whole := make([]byte, 4*ecChunk)
			for i := range whole {
				whole[i] = byte(i * 7)
			}
			f, err := c.Open(ctx, "/f", os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(whole, 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Flush(); err != nil {
				b.Fatal(err)
			}
			if mode != "shrink open" {
				f.Close()
			}
			var st client.ErasureStats
			b.ResetTimer()
			for i := range b.N {
				size := int64(shrinkSize)
				if mode == "grow path" {
					size = int64(len(whole)) + int64(i+1)
				}
				before := c.ErasureStats()
				b.StartTimer()
				if mode == "shrink open" {
					err = f.Truncate(size)
				} else {
					err = c.Truncate(ctx, "/f", size)
				}
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				after := c.ErasureStats()
				st.Reads += after.Reads - before.Reads
				st.Writes += after.Writes - before.Writes
				st.Locks += after.Locks - before.Locks
				if mode == "grow path" {
					continue
				}
				if mode == "shrink open" {
					_, err = f.WriteAt(whole[shrinkSize:], shrinkSize)
					if err == nil {
						err = f.Flush()
					}
				} else {
					var g *client.File
					if g, err = c.Open(ctx, "/f", os.O_RDWR, 0); err == nil {
						_, err = g.WriteAt(whole[shrinkSize:], shrinkSize)
						if cerr := g.Close(); err == nil {
							err = cerr
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(st.Reads)/n, "reads/op")
			b.ReportMetric(float64(st.Writes)/n, "writes/op")
			b.ReportMetric(float64(st.Locks)/n, "locks/op")
		})
	}
}
