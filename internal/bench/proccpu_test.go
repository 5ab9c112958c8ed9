package bench

import (
	"os"
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
