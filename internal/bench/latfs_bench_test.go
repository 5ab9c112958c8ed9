package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// BenchmarkLatfsLib is one latfs sample (100 files created, then deleted)
// of 0 and 16 KiB on the RAM-parity rows with async metadata, with and
// without creates sent at close, for profiles.
func BenchmarkLatfsLib(b *testing.B) {
	for _, name := range []string{weftParity + ", metadata async", weftParity + ", metadata async, create at close"} {
		i := slices.IndexFunc(latfsVariants, func(v libVariant) bool { return v.name == name })
		v := latfsVariants[i]
		for _, kb := range []int{0, 16} {
			b.Run(fmt.Sprintf("%s/%dKiB", strings.TrimPrefix(name, weftParity+", "), kb), func(b *testing.B) {
				ctx := context.Background()
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
				fs := libLatfs(ctx, c.Client)
				var create, del float64
				b.ResetTimer()
				for i := range b.N {
					cr, d, err := latfsOnce(ctx, fs, fmt.Sprintf("d%d", i), 100, kb<<10)
					if err != nil {
						b.Fatal(err)
					}
					create += cr
					del += d
				}
				b.ReportMetric(create/float64(b.N), "create-ms")
				b.ReportMetric(del/float64(b.N), "delete-ms")
			})
		}
	}
}
