package meta

import (
	"context"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestCallerContextBoundsCrossServerOps: a rename across servers whose
// participant cannot take its locks ends when its caller's deadline does,
// not after the servers' own peer timeout (10 s), and leaves nothing held:
// the same rename succeeds once the participant is free.
func TestCallerContextBoundsCrossServerOps(t *testing.T) {
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold = 2; cfg.SplitBits = 1 })
	src, dst := c.dirOn(0, "a"), c.dirOn(1, "b")
	if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: "f", Mode: 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	// Someone holds the target directory's stripe on its server.
	mu := &c.srv(1).locks[stripeOf(core.Ino(dst.Ino))]
	mu.Lock()
	locked := true
	defer func() {
		if locked {
			mu.Unlock()
		}
	}()

	rename := &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: "f", DstParent: dst.Ino, DstName: "g"}
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.srv(0).Rename(callCtx, rename)
	took := time.Since(start)
	if err == nil {
		t.Fatal("rename succeeded while its participant's lock was held")
	}
	if k := errs.KindOf(err); k != errs.Timeout && k != errs.Canceled {
		t.Errorf("rename past its caller's deadline: %v (kind %v), want Timeout or Canceled", err, k)
	}
	if took > 3*time.Second {
		t.Errorf("rename took %v past a 300ms deadline: the caller's context did not reach the participant's lock", took)
	}

	mu.Unlock()
	locked = false
	if _, err := c.srv(0).Rename(ctx, rename); err != nil {
		t.Fatalf("rename once the participant is free: %v", err)
	}
	if _, err := c.lookupOn(1, dst.Ino, "g"); err != nil {
		t.Errorf("target after the rename: %v", err)
	}
}
