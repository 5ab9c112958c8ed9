package store

import (
	"bytes"
	"context"
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

// TestStatFSStored: with want_stored a store reports what its own chunks
// take, not its disk's use (weft status showed a whole disk's use for an
// empty store).
func TestStatFSStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		stored := func() uint64 {
			t.Helper()
			r, err := s.StatFS(context.Background(), &weftpb.StoreStatFSRequest{WantStored: true})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetStored()
		}
		if n := stored(); n > 64<<10 {
			t.Errorf("an empty store reports %d bytes stored", n)
		}
		mustWrite(t, s, 7, 0, 0, bytes.Repeat([]byte("x"), 1<<20))
		if n := stored(); n < 1<<20 || n > 2<<20 {
			t.Errorf("a store holding 1 MiB reports %d bytes stored", n)
		}
	})
}
