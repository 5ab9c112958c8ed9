package client

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/weftfs/weft/proto/weftpb"
)

// TestSameHostWithoutSocket: a store address with no same-host socket
// beside it gives no path (the caller uses the wire), and the client does
// not dial it again until sameHostRetry has passed.
func TestSameHostWithoutSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a TCP address, no socket beside it
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := &sameHost{addr: ln.Addr().String()}
	defer h.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r, err := h.call(ctx, &pb.LocalIORequest{Chunk: &pb.ChunkID{Ino: 1}, Length: 1}, f); err != errNoPath || r != nil {
		t.Fatalf("call without a socket: %v, %v; want errNoPath", r, err)
	}
	h.mu.Lock()
	wait := time.Until(h.mu.retryAt)
	h.mu.Unlock()
	if wait <= 0 || wait > sameHostRetry {
		t.Fatalf("next dial in %v, want within %v", wait, sameHostRetry)
	}
	if h.available(ctx) {
		t.Fatal("available before the retry time")
	}
}
