package client_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// TestPatchgroupRules: the paper's safety rule (a group with a dependent is
// sealed) and the misuse errors.
func TestPatchgroupRules(t *testing.T) {
	c := newTestClientBackend(t, 64<<10, "mem")
	a, b, x := c.NewPatchgroup(), c.NewPatchgroup(), c.NewPatchgroup()
	if err := c.Engage(a); err != nil {
		t.Fatal(err)
	}
	if err := b.DependOn(a); !errs.Is(err, errs.Busy) {
		t.Errorf("depending on an engaged group: %v, want Busy", err)
	}
	if err := c.Disengage(a); err != nil {
		t.Fatal(err)
	}
	if err := c.Disengage(a); !errs.Is(err, errs.Invalid) {
		t.Errorf("disengaging a group not engaged: %v, want Invalid", err)
	}
	if err := b.DependOn(a); err != nil {
		t.Fatal(err)
	}
	if err := c.Engage(a); !errs.Is(err, errs.Invalid) {
		t.Errorf("engaging a sealed group: %v, want Invalid", err)
	}
	if err := a.DependOn(b); !errs.Is(err, errs.Invalid) {
		t.Errorf("a cycle: %v, want Invalid", err)
	}
	if err := x.DependOn(b); err != nil {
		t.Fatal(err)
	}
	if err := a.DependOn(x); !errs.Is(err, errs.Invalid) {
		t.Errorf("a longer cycle: %v, want Invalid", err)
	}
	if err := b.DependOn(b); !errs.Is(err, errs.Invalid) {
		t.Errorf("depending on itself: %v, want Invalid", err)
	}
	if err := c.Engage(x); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); !errs.Is(err, errs.Busy) {
		t.Errorf("closing an engaged group: %v, want Busy", err)
	}
	if err := c.Disengage(x); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Engage(x); !errs.Is(err, errs.BadHandle) {
		t.Errorf("engaging a closed group: %v, want BadHandle", err)
	}
	if err := x.Close(); !errs.Is(err, errs.BadHandle) {
		t.Errorf("closing twice: %v, want BadHandle", err)
	}
}

// TestPatchgroupBarrier: a message's data, written under one group into a
// file still open, is flushed before a rename in a group that depends on
// it is sent: another client sees the whole message at the new name as
// soon as the rename returns. Without the dependency the data would still
// sit in the writer's buffers.
func TestPatchgroupBarrier(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		c, cfg := newMultiClient(t, 2, 4000, 0, 64<<10)
		ctx := context.Background()
		msg := bytes.Repeat([]byte("message "), 256)
		copyG, publish := c.NewPatchgroup(), c.NewPatchgroup()
		if err := c.Engage(copyG); err != nil {
			t.Fatal(err)
		}
		f, err := c.Create(ctx, "/tmp-msg", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(msg); err != nil {
			t.Fatal(err)
		}
		if err := c.Disengage(copyG); err != nil {
			t.Fatal(err)
		}
		if ordered {
			if err := publish.DependOn(copyG); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Engage(publish); err != nil {
			t.Fatal(err)
		}
		if err := c.Rename(ctx, "/tmp-msg", "/msg", 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Disengage(publish); err != nil {
			t.Fatal(err)
		}
		got, err := readFresh(t, cfg, "/msg")
		switch {
		case err != nil:
			t.Fatal(err)
		case ordered && !bytes.Equal(got, msg):
			t.Errorf("with the dependency, the published message reads %d bytes, want %d", len(got), len(msg))
		case !ordered && len(got) != 0:
			// The test shows the barrier only if the data is otherwise
			// still in the writer's buffers.
			t.Errorf("without the dependency the message was already visible (%d bytes): the test shows nothing", len(got))
		}
		if err := publish.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// readFresh reads path through a new client of cfg.
func readFresh(t *testing.T, cfg *config.Cluster, path string) ([]byte, error) {
	c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx := context.Background()
	f, err := c.Open(ctx, path, 0, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
