package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkSeqio is weft bench seqio's pattern through the library on five
// mem stores with each redundancy: a new file of size bytes written in 1
// MiB records, then rewritten in place, each followed by fsync and close,
// then removed. It reports each phase's MB/s.
func BenchmarkSeqio(b *testing.B) {
	for _, size := range []int64{1 << 20, 4 << 20, 16 << 20} {
		for _, red := range []string{"replicas:2", "ec:4+1"} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, red), func(b *testing.B) {
				ec := newECCluster(b, red, 5)
				c := ec.client(4 << 20)
				ctx := context.Background()
				rec := make([]byte, 1<<20)
				for i := range rec {
					rec[i] = byte(i * 7)
				}
				write := func(name string, flags int) time.Duration {
					start := time.Now()
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
					return time.Since(start)
				}
				var w, rw time.Duration
				b.ResetTimer()
				for i := range b.N {
					name := fmt.Sprintf("/f%d", i)
					w += write(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
					rw += write(name, os.O_WRONLY)
					if err := c.Unlink(ctx, name); err != nil {
						b.Fatal(err)
					}
				}
				mb := float64(size) * float64(b.N) / 1e6
				b.ReportMetric(mb/w.Seconds(), "write-MB/s")
				b.ReportMetric(mb/rw.Seconds(), "rewrite-MB/s")
			})
		}
	}
}
