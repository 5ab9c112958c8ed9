package cluster

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestCapabilitiesAcrossProcesses runs capabilities on real processes (weft
// cluster start's servers): a new cluster has a 0600 secret; a store
// refuses a raw read without a capability; a capability handed to another
// user is refused by the stores as soon as the owner's chmod 000 returns;
// and after a store is killed (SIGKILL) and restarted, the capabilities it
// forgot the revocations of are refused, and a client that held one
// fetches a fresh one and reads on.
func TestCapabilitiesAcrossProcesses(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 2, Replication: 2})
	cfg := p.Config()
	if st, err := os.Stat(cfg.CapabilitySecret); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("capability secret %q: %v", cfg.CapabilitySecret, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.New(ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := bytes.Repeat([]byte("capability "), 100_000) // 1.1 MB: chunked
	if _, err := c.WriteFrom(ctx, "/f", bytes.NewReader(data), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	f, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := f.Ref()

	dial, err := DialOptions(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	metaPeer := rpc.NewPeer(cfg.Meta[0].Addr, dial)
	defer metaPeer.Close()
	var open weftpb.OpenReply
	nobody := &weftpb.Creds{Uid: 65534, Gid: 65534}
	if err := metaPeer.Call(ctx, weftpb.MethodOpen, &weftpb.OpenRequest{Creds: nobody,
		Node: &weftpb.NodeRef{Ino: uint64(ref.Ino), Parent: uint64(ref.Parent), Name: ref.Name}}, &open); err != nil {
		t.Fatal(err)
	}
	read := func(store int, tok []byte) error {
		sp := rpc.NewPeer(cfg.Store[store].Addr, dial)
		defer sp.Close()
		_, err := sp.CallData(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: &weftpb.ChunkID{Ino: uint64(ref.Ino)}, Length: 100, Capability: tok}, nil, &weftpb.ReadChunkReply{})
		return err
	}
	for s := range cfg.Store {
		if err := read(s, nil); !errs.Is(err, errs.CapabilityRefused) {
			t.Fatalf("store %d, read without a capability: %v", s, err)
		}
		if err := read(s, open.Capability); err != nil {
			t.Fatalf("store %d, read with nobody's capability: %v", s, err)
		}
	}
	if err := c.Chmod(ctx, "/f", 0); err != nil {
		t.Fatal(err)
	}
	for s := range cfg.Store {
		if err := read(s, open.Capability); !errs.Is(err, errs.CapabilityRefused) {
			t.Fatalf("store %d, nobody's capability right after chmod 000: %v", s, err)
		}
	}

	// The client's capability predates the restart: the restarted store
	// refuses it, the client renews it and reads on.
	for s := range cfg.Store {
		if err := p.Kill(RoleStore, s); err != nil {
			t.Fatal(err)
		}
		if err := p.Restart(ctx, RoleStore, s); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the stores restarted: %v (equal %v)", err, bytes.Equal(got, data))
	}
}
