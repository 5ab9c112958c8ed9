package bench

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"
)

// TestProcessCPU: the benchmark's own CPU time grows while it spins (within
// a bound of wall time, however loaded the machine), and a process that does
// not exist is an error.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const spin = 200 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	var used time.Duration
	for used < spin {
		if time.Now().After(deadline) {
			t.Fatalf("the process used %v of CPU in a minute of spinning", used)
		}
		x := 0
		for i := range 10_000_000 {
			x += i
		}
		_ = x
		now, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		used = now - before
	}
	if _, err := processCPU(-1); err == nil {
		t.Fatal("the CPU time of a process that cannot exist")
	}
}

// TestRequestsByMethod: every *_rpc_requests_total sample counts, by its
// method label (with its status unless ok), whatever its namespace; other
// metrics, help and type lines do not; a bad value is an error.
func TestRequestsByMethod(t *testing.T) {
	text := `# HELP weft_meta_rpc_requests_total RPC requests by method and status.
# TYPE weft_meta_rpc_requests_total counter
weft_meta_rpc_requests_total{method="getattr",status="ok"} 3543
weft_meta_rpc_requests_total{method="lookup",status="not_exist"} 3456
weft_meta_rpc_requests_total{method="lookup",status="ok"} 7
weft_store_rpc_requests_total{method="read_chunk",status="ok"} 1e3
weft_meta_rpc_requests_total{method="read_chunk",status="ok"} 2
weft_meta_rpc_request_bytes_total{method="getattr"} 99999
weft_meta_rpc_requests_totally{method="x"} 5
go_goroutines 42
`
	by, err := requestsByMethod(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"getattr": 3543, "lookup not_exist": 3456, "lookup": 7, "read_chunk": 1002}
	if !maps.Equal(by, want) {
		t.Fatalf("by method %v, want %v", by, want)
	}
	if n := sumRequests(by); n != 3543+3456+7+1002 {
		t.Fatalf("sum %v, want %v", n, 3543+3456+7+1002)
	}
	if _, err := requestsByMethod(strings.NewReader(`weft_meta_rpc_requests_total{method="a"} x` + "\n")); err == nil {
		t.Fatal("a value that is no number was summed")
	}
}
