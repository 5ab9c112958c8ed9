package cli

import (
	"fmt"
	"io"
)

// printStripes is status's line for an erasure-coded cluster: the stripes
// with units on a store that lost its chunks (degraded: they read by
// rebuilding, and survive one loss fewer until weft repair rebuilds them).
func printStripes(w io.Writer, r *replicaStatus) {
	fmt.Fprintf(w, "\nstripes (%s): %d units, %d degraded", r.Erasure, r.Chunks, r.UnderReplicated)
	if r.UnderReplicated > 0 {
		fmt.Fprintf(w, " (%d units to rebuild): run weft repair", r.Missing)
	}
	if r.Marked > 0 {
		// A client's parity cache marked their parity stale: in flight,
		// or left by a client that died (repair rewrites those).
		fmt.Fprintf(w, "; %d with parity marked stale", r.Marked)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "; incomplete count: %s", r.Error)
	}
	fmt.Fprintln(w)
}
