package bench

import (
	"context"
	"testing"
	"time"
)

// TestSeqreadRemoteRows runs each remote row's client (a reader across a
// dsl link, direct or through an edge) on a small file: the reads work,
// and only the rows with a chunk cache read the file again from it.
func TestSeqreadRemoteRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range seqreadRemotes() {
		t.Run(r.name, func(t *testing.T) {
			lc, err := startLib(ctx, t.TempDir(), libOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			c, err := r.client(ctx, lc)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := libOpener(ctx, c)
			if err := writeRandom(o, fileName(17), 1<<17); err != nil {
				t.Fatal(err)
			}
			if _, err := meanRead(ctx, o, fileName(17), 3); err != nil {
				t.Fatal(err)
			}
			hits := c.ChunkCacheStats().Hits
			if cached := r.name != remoteNoCache; cached != (hits > 0) {
				t.Fatalf("%d chunks read from the cache", hits)
			}
		})
	}
}
