package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// BenchmarkLatfsLib is one latfs sample (100 files of 16 KiB created, then
// deleted) on the RAM-parity variant with async metadata, for profiles.
func BenchmarkLatfsLib(b *testing.B) {
	i := slices.IndexFunc(latfsVariants, func(v libVariant) bool { return v.name == weftParity+", metadata async" })
	v := latfsVariants[i]
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
		cr, d, err := latfsOnce(ctx, fs, fmt.Sprintf("d%d", i), 100, 16<<10)
		if err != nil {
			b.Fatal(err)
		}
		create += cr
		del += d
	}
	b.ReportMetric(create/float64(b.N), "create-ms")
	b.ReportMetric(del/float64(b.N), "delete-ms")
}
