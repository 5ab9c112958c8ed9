package client_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// TestOrphanShrinkWithClientIdentity: a user's client (a client
// certificate, not the cluster's administrator) cuts a file it removed
// while open. The meta server no longer drops the chunks of a file with no
// name, so the client does, under the file's write capability; the stores
// refused that to every client identity before.
func TestOrphanShrinkWithClientIdentity(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: filepath.Join(dir, "cluster"), Backend: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	cfg := emb.Config()
	ca, err := auth.LoadCA(cfg.CA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Issue(auth.Identity{Role: auth.RoleClient, UIDs: auth.Range{Min: 1000, Max: 1000}, GIDs: auth.Range{Min: 1000, Max: 1000}}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Join(dir, "user")
	if err := b.Write(id); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := admin.Mkdir(ctx, "/home", 0o777); err != nil {
		t.Fatal(err)
	}
	cc := cluster.ClientConfig(cfg, core.Creds{UID: 1000, GID: 1000}, nil)
	cc.Identity = id
	cc.ChunkSize = 64 << 10
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	data := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16) // four chunks
	f, err := c.Create(ctx, "/home/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlink(ctx, "/home/f"); err != nil {
		t.Fatal(err)
	}
	const cut = 70 << 10 // inside the second chunk
	if err := f.Truncate(cut); err != nil {
		t.Fatalf("truncate of the open, removed file: %v", err)
	}
	// Grown again: the bytes past the cut must read as zeros, not as the
	// old data a store kept.
	if err := f.Truncate(int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(data[:cut]), make([]byte, len(data)-cut)...)
	if !bytes.Equal(got, want) {
		t.Fatal("the cut and regrown file does not read as its first bytes then zeros")
	}
}
