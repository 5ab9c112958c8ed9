package rpc

import (
	"context"

	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/proto/weftpb"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// payload64 encodes to exactly 64 bytes: a tag, a length and 62 bytes.
var payload64 = &weftpb.GetXattrReply{Value: make([]byte, 62)}

func BenchmarkRoundTrip64(b *testing.B) {
	if n := len(mustMarshal(b, payload64)); n != 64 {
		b.Fatalf("payload encodes to %d bytes", n)
	}
	c, stop, err := startPingServer(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	var resp weftpb.GetXattrReply
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, pingMethod, payload64, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTrip64Parallel is many callers sharing one connection.
func BenchmarkRoundTrip64Parallel(b *testing.B) {
	c, stop, err := startPingServer(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	b.SetParallelism(4)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var resp weftpb.GetXattrReply
		for pb.Next() {
			if err := c.Call(ctx, pingMethod, payload64, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRawTCPPingPong64(b *testing.B) {
	c, stop, err := startRawEcho(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := rawPingPong(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMeasureRoundTrip(t *testing.T) {
	rpcLat, rawLat, err := MeasureRoundTrip(testCtx(t), 200, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(rpcLat) != 200 || len(rawLat) != 200 {
		t.Fatalf("got %d and %d samples; want 200 each", len(rpcLat), len(rawLat))
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	t.Logf("median round trip: rpc %v, raw %v", median(rpcLat), median(rawLat))
	for _, d := range append(rpcLat, rawLat...) {
		if d <= 0 {
			t.Fatalf("non-positive latency %v", d)
		}
	}
	if _, _, err := MeasureRoundTrip(testCtx(t), 0, 64); err == nil {
		t.Fatal("n = 0 accepted")
	}
}

// BenchmarkRoundTripVsRaw interleaves rpc calls and raw ping-pongs (see
// MeasureRoundTrip), so that both see the same machine load, and reports
// their medians and ratio.
func BenchmarkRoundTripVsRaw(b *testing.B) {
	rpcLat, rawLat, err := MeasureRoundTrip(context.Background(), max(b.N, 1000), 64)
	if err != nil {
		b.Fatal(err)
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	r, w := median(rpcLat), median(rawLat)
	b.ReportMetric(float64(r.Nanoseconds()), "rpc-median-ns")
	b.ReportMetric(float64(w.Nanoseconds()), "raw-median-ns")
	b.ReportMetric(float64(r)/float64(w), "ratio")
}
