package client_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// capCluster is an embedded cluster (a new one checks capabilities), a
// client, and raw connections to its meta server and store for requests
// no honest client would send.
type capCluster struct {
	c           *client.Client
	cc          client.Config // c's, for more clients
	meta, store *rpc.Peer
}

func newCapCluster(t *testing.T) *capCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { emb.Close() })
	if emb.Config().CapabilitySecret == "" {
		t.Fatal("a new embedded cluster has no capability secret")
	}
	cc := cluster.ClientConfig(emb.Config(), core.Root, nil)
	cc.ChunkSize = 64 << 10
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// The raw connections are authenticated (the cluster's admin
	// identity): what they lack is a capability.
	dial, err := cluster.DialOptions(emb.Config(), "")
	if err != nil {
		t.Fatal(err)
	}
	cl := &capCluster{c: c, cc: cc, meta: rpc.NewPeer(emb.MetaAddr(), dial), store: rpc.NewPeer(emb.StoreAddr(), dial)}
	t.Cleanup(func() { cl.meta.Close(); cl.store.Close() })
	return cl
}

var (
	owner = core.Creds{UID: 1000, GID: 1000}
	other = core.Creds{UID: 1001, GID: 1001}
)

func as(c core.Creds) context.Context { return client.WithCreds(context.Background(), c) }

// rawOpen opens ref as creds with flags straight at the meta server and
// returns the capability it hands out.
func (cl *capCluster) rawOpen(t *testing.T, creds core.Creds, ref client.Ref, flags uint32) []byte {
	t.Helper()
	var r weftpb.OpenReply
	err := cl.meta.Call(context.Background(), weftpb.MethodOpen, &weftpb.OpenRequest{
		Creds: &weftpb.Creds{Uid: creds.UID, Gid: creds.GID}, Node: &weftpb.NodeRef{Ino: uint64(ref.Ino), Parent: uint64(ref.Parent), Name: ref.Name}, Flags: flags}, &r)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if len(r.Capability) == 0 {
		t.Fatal("open reply without a capability")
	}
	return r.Capability
}

// rawRead reads chunk 0 of ino at the store with tok.
func (cl *capCluster) rawRead(ino core.Ino, tok []byte) ([]byte, error) {
	var r weftpb.ReadChunkReply
	return cl.store.CallData(context.Background(), weftpb.MethodReadChunk,
		&weftpb.ReadChunkRequest{Chunk: &weftpb.ChunkID{Ino: uint64(ino)}, Length: 1 << 20, Capability: tok}, nil, &r)
}

// writeChunked creates /pub/name as owner with mode 0644 and content past
// the inline limit, so that it lives on the store.
func (cl *capCluster) writeChunked(t *testing.T, name string) (client.Ref, []byte) {
	t.Helper()
	if err := cl.c.Mkdir(context.Background(), "/pub", 0o777); err != nil && !errs.Is(err, errs.Exist) {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("secret "), 20_000)
	f, err := cl.c.Create(as(owner), "/pub/"+name, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = cl.c.Open(as(owner), "/pub/"+name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref := f.Ref()
	f.Close()
	return ref, data
}

// TestRawStoreRequestsRefused: on a new cluster, a store refuses chunk
// reads, writes and deletes that carry no capability or a forged one,
// over the wire, and the file keeps its content. (Before capabilities,
// any process that reached the store's port read, overwrote and deleted
// them.)
func TestRawStoreRequestsRefused(t *testing.T) {
	cl := newCapCluster(t)
	ref, data := cl.writeChunked(t, "f")
	tok := cl.rawOpen(t, owner, ref, 0)
	forged := bytes.Clone(tok)
	if len(forged) > 0 {
		forged[len(forged)-1] ^= 1 // the tag
	}
	ctx := context.Background()
	id := &weftpb.ChunkID{Ino: uint64(ref.Ino)}
	for _, bad := range []struct {
		name string
		tok  []byte
	}{{"no", nil}, {"a forged", forged}} {
		if _, err := cl.rawRead(ref.Ino, bad.tok); !errs.Is(err, errs.CapabilityRefused) {
			t.Errorf("read with %s capability: %v", bad.name, err)
		}
		_, err := cl.store.CallData(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: id, Capability: bad.tok}, []byte("overwritten"), &weftpb.WriteChunkReply{})
		if !errs.Is(err, errs.CapabilityRefused) {
			t.Errorf("write with %s capability: %v", bad.name, err)
		}
		err = cl.store.Call(ctx, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: uint64(ref.Ino), Capability: bad.tok}, &weftpb.DeleteChunksReply{})
		if !errs.Is(err, errs.CapabilityRefused) {
			t.Errorf("delete with %s capability: %v", bad.name, err)
		}
	}
	// A read-only capability does not write.
	_, err := cl.store.CallData(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: id, Capability: tok}, []byte("overwritten"), &weftpb.WriteChunkReply{})
	if !errs.Is(err, errs.CapabilityRefused) {
		t.Errorf("write with a read capability: %v", err)
	}
	got, err := cl.rawRead(ref.Ino, tok)
	if err != nil || !bytes.Equal(got, data[:len(got)]) || len(got) == 0 {
		t.Fatalf("read with a good capability: %v (%d bytes)", err, len(got))
	}
}

// TestChmodRevokesAtTheStore: another user's capability stops working at
// the store as soon as the owner's chmod 000 (from another client) returns;
// a chmod that only adds bits leaves it working. The other user's open
// file then fails with EACCES (its fresh capability is refused by the meta
// server), while the owner's open file goes on (the owner keeps access to
// what it opened, as on NFS).
func TestChmodRevokesAtTheStore(t *testing.T) {
	cl := newCapCluster(t)
	ref, data := cl.writeChunked(t, "f")
	old := cl.rawOpen(t, other, ref, 0)
	theirs, err := cl.c.Open(as(other), "/pub/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	// The owner's open file and chmod go through clients of their own (a
	// client's open state of a file is shared by its users, and commits
	// as the first opener).
	cc3, err := client.New(clientConfigOf(t, cl))
	if err != nil {
		t.Fatal(err)
	}
	defer cc3.Close()
	mine, err := cc3.Open(as(owner), "/pub/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	cc2, err := client.New(clientConfigOf(t, cl))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if err := cc2.Chmod(as(owner), "/pub/f", 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.rawRead(ref.Ino, old); err != nil {
		t.Fatalf("after a chmod that only adds bits: %v", err)
	}
	if err := cc2.Chmod(as(owner), "/pub/f", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.rawRead(ref.Ino, old); !errs.Is(err, errs.CapabilityRefused) {
		t.Fatalf("the other user's capability right after chmod 000: %v, want refused", err)
	}
	buf := make([]byte, 100)
	if _, err := theirs.ReadAtContext(as(other), buf, 0); !errs.Is(err, errs.Permission) {
		t.Fatalf("the other user's open file after chmod 000: %v, want EACCES", err)
	}
	if _, err := mine.ReadAtContext(as(owner), buf, 0); err != nil && err != io.EOF || !bytes.Equal(buf, data[:100]) {
		t.Fatalf("the owner's open file after chmod 000: %v", err)
	}
	if _, err := mine.WriteAtContext(as(owner), []byte("still mine"), 0); err != nil {
		t.Fatal(err)
	}
	if err := mine.Sync(); err != nil {
		t.Fatalf("the owner's write after chmod 000: %v", err)
	}
}

// clientConfigOf returns a config for a second client of cl's cluster.
func clientConfigOf(t *testing.T, cl *capCluster) client.Config {
	t.Helper()
	cc := cl.cc
	cc.RetryFor = 5 * time.Second
	return cc
}

// BenchmarkRenewCapability is the round trip that fetches a fresh
// capability after a store refused one (GetCapability on loopback).
func BenchmarkRenewCapability(b *testing.B) {
	c := newTestClient(b, 64<<10)
	ctx := context.Background()
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for b.Loop() {
		if err := f.RenewCapability(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
