package bench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/weftfs/weft/internal/client"
)

// BenchmarkSeqioLib runs weft bench seqio's library pattern
// (seqioSideBySide: 16 MiB per sample, write, rewrite, read, reread) on
// mirrored ×2 and ec:4+1 side by side, as weft bench seqio does, for CPU
// profiles (-cpuprofile) and per-op MB/s of each (-N-MB/s: variant N);
// SEQIO_ALL=1 runs every library variant beside them, as the bench does.
func BenchmarkSeqioLib(b *testing.B) {
	variants := libVariants[2:]
	if os.Getenv("SEQIO_ALL") != "" {
		variants = libVariants
	}
	rep, ec := len(variants)-2, len(variants)-1
	for _, size := range []int64{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			ctx := context.Background()
			var fss []seqioFS
			var cs []*client.Client
			for _, v := range variants {
				lc, err := startLib(ctx, b.TempDir(), v.opts)
				if err != nil {
					b.Fatal(err)
				}
				defer lc.Close()
				c, err := lc.client(nil, true)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cs = append(cs, c.Client)
				fss = append(fss, libSeqio(ctx, c.Client))
			}
			sums := make([][]float64, len(variants))
			for v := range sums {
				sums[v] = make([]float64, len(seqioOps))
			}
			b.ResetTimer()
			for i := range b.N {
				rates, errs := seqioSideBySide(ctx, fss, fmt.Sprintf("s%d", i), size)
				for v := range variants {
					if errs[v] != nil {
						b.Fatal(errs[v])
					}
					for k, r := range rates[v] {
						sums[v][k] += r
					}
				}
			}
			b.StopTimer()
			for k, op := range seqioOps {
				for v := range variants {
					b.ReportMetric(sums[v][k]/float64(b.N), fmt.Sprintf("%s-%d-MB/s", op, v))
				}
				b.ReportMetric(sums[ec][k]/sums[rep][k], op+"-ratio")
			}
			if st := cs[ec].ErasureStats(); st.Reads+st.Writes > 0 {
				b.ReportMetric(float64(st.Reads)/float64(b.N), "unitreads/op")
				b.ReportMetric(float64(st.Writes)/float64(b.N), "unitwrites/op")
			}
		})
	}
}
