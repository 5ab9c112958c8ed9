package client_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// TestOpenRacingChange: a change by another client that lands between an
// open's reply and the open state it makes is seen by the first read. Its
// recall came before the state existed, so nothing marked it stale, and a
// reread through the open file kept the old content until the next recall
// (linz: reread(ino 783) -> "" after another mount's write of "A225" was
// closed).
func TestOpenRacingChange(t *testing.T) {
	ctx := context.Background()
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	newClient := func() *client.Client {
		c, err := client.New(cluster.ClientConfig(emb.Config(), core.Root, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.OnRecall(func([]client.LeaseKey) {}) // a cache that takes leases
		return c
	}
	a, b := newClient(), newClient()
	write := func(c *client.Client, data string) {
		t.Helper()
		f, err := c.Open(ctx, "/f", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write(b, "v1")
	a.SetAfterOpenReply(func() {
		a.SetAfterOpenReply(nil)
		write(b, "v2")
	})
	f, err := a.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "v2" {
		t.Errorf("first read after the open: %q, want \"v2\" (written and closed by the other client before the open returned)", got)
	}
}
