package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// BenchmarkSeqRewrite is seqio's rewrite (weft bench seqio): a file of
// size bytes rewritten in place in 1 MiB records, then fsync and close, on
// five mem stores with each redundancy.
func BenchmarkSeqRewrite(b *testing.B) {
	for _, red := range []string{"replicas:2", "ec:4+1"} {
		for _, size := range []int64{1 << 20, 4 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%s/%dMiB", red, size>>20), func(b *testing.B) {
				ec := newECCluster(b, red, 5)
				c := ec.client(4 << 20)
				ctx := context.Background()
				rec := make([]byte, 1<<20)
				for i := range rec {
					rec[i] = byte(i * 7)
				}
				write := func(flags int) {
					f, err := c.Open(ctx, "/f", flags, 0o644)
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
				write(os.O_WRONLY | os.O_CREATE | os.O_TRUNC)
				b.SetBytes(size)
				b.ResetTimer()
				for range b.N {
					write(os.O_WRONLY)
				}
			})
		}
	}
}
