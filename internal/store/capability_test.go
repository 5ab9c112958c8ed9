package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// capStore is a store that checks capabilities, with a minter of the same
// cluster secret whose clock the test sets.
type capStore struct {
	s     *Server
	keys  *auth.Keyring
	clock time.Time
	mint  *auth.Minter
}

func openCapStore(t *testing.T) *capStore {
	t.Helper()
	keys, err := auth.NewKeyring(bytes.Repeat([]byte{7}, auth.SecretLen))
	if err != nil {
		t.Fatal(err)
	}
	cs := &capStore{keys: keys, clock: time.Now()}
	now := func() time.Time { return cs.clock }
	v := auth.NewVerifier(keys, 0, now)
	cs.clock = cs.clock.Add(2 * auth.FloorSlack) // past the store's start floor
	cs.mint, err = auth.NewMinter(keys, 0, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	cs.s = openStore(t, Config{Backend: "mem", MemLimit: 64 << 20, Capabilities: v})
	return cs
}

// chunkOps tries every chunk method on chunk (ino, 0) with tok and returns
// each one's error, by name.
func chunkOps(s *Server, ino uint64, tok []byte) map[string]error {
	ctx := context.Background()
	out := map[string]error{}
	_, out["write"] = s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(ino, 0), Data: []byte("evil"), Capability: tok})
	_, _, out["read"] = s.ReadChunkData(ctx, &weftpb.ReadChunkRequest{Chunk: cid(ino, 0), Length: 10, Capability: tok}, nil)
	_, out["truncate"] = s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: cid(ino, 0), Size: 1, Capability: tok})
	_, out["delete"] = s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: ino, Capability: tok})
	_, out["sync"] = s.SyncChunks(ctx, &weftpb.SyncChunksRequest{Ino: ino, Capability: tok})
	return out
}

// TestCapabilityRefusedAtStore: with capability checks on, a chunk request
// without a capability, with a forged, expired or revoked one, or with one
// for another inode, chunk range or right is refused with
// errs.CapabilityRefused and changes nothing. (Before capabilities, every
// one of these requests succeeded: any process that reached the port read,
// overwrote and deleted any file's chunks.)
func TestCapabilityRefusedAtStore(t *testing.T) {
	cs := openCapStore(t)
	const ino = 42
	good := cs.mint.File(ino, 1, auth.Read|auth.Write, 0)
	if _, err := cs.s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(ino, 0), Data: []byte("secret data"), Capability: good}); err != nil {
		t.Fatalf("write with a good capability: %v", err)
	}
	forged := bytes.Clone(good)
	forged[10] ^= 1 // another inode, same tag
	foreignKeys, _ := auth.NewKeyring(bytes.Repeat([]byte{8}, auth.SecretLen))
	foreign, _ := auth.NewMinter(foreignKeys, 0, time.Minute, func() time.Time { return cs.clock })
	expired, _ := auth.NewMinter(cs.keys, 0, time.Second, func() time.Time { return cs.clock.Add(-2 * time.Second) })
	ranged := auth.Mint(cs.keys.Key(0), auth.Capability{Ino: ino, First: 1, Last: 9, Rights: auth.Read | auth.Write,
		IssuedNs: cs.clock.UnixNano(), ExpiryNs: cs.clock.Add(time.Minute).UnixNano(), Generation: 1})
	cases := []struct {
		name   string
		tok    []byte
		reason auth.Reason
		ops    []string
	}{
		{"none", nil, auth.ReasonMissing, nil},
		{"forged", forged, auth.ReasonForged, nil},
		{"foreign secret", foreign.File(ino, 1, auth.Read|auth.Write, 0), auth.ReasonForged, nil},
		{"expired", expired.File(ino, 1, auth.Read|auth.Write, 0), auth.ReasonExpired, nil},
		{"other inode", cs.mint.File(ino+1, 1, auth.Read|auth.Write, 0), auth.ReasonWrongInode, nil},
		{"other chunks", ranged, auth.ReasonWrongRange, nil},
		{"read only", cs.mint.File(ino, 1, auth.Read, 0), auth.ReasonWrongRights, []string{"write", "truncate", "delete", "sync"}},
	}
	for _, tc := range cases {
		for op, err := range chunkOps(cs.s, ino, tc.tok) {
			want := tc.ops == nil
			for _, o := range tc.ops {
				want = want || o == op
			}
			if !want {
				continue
			}
			if !errs.Is(err, errs.CapabilityRefused) || auth.ReasonOf(err) != tc.reason {
				t.Errorf("%s capability, %s: %v (reason %v), want refused (%v)", tc.name, op, err, auth.ReasonOf(err), tc.reason)
			}
		}
	}
	// Revoked: a chmod on the meta server pushed generation 2.
	if _, err := cs.s.RevokeCapabilities(context.Background(), &weftpb.RevokeCapabilitiesRequest{
		Revocations: []*weftpb.Revocation{{Ino: ino, Generation: 2, RevokedAtNs: cs.clock.UnixNano()}}}); err != nil {
		t.Fatal(err)
	}
	for op, err := range chunkOps(cs.s, ino, good) {
		if auth.ReasonOf(err) != auth.ReasonRevoked {
			t.Errorf("revoked capability, %s: %v, want refused (revoked)", op, err)
		}
	}
	if n := metricValue(t, cs.s.cfg.Registry, "weft_store_capability_revocations"); n != 1 {
		t.Fatalf("revocations remembered: %v, want 1", n)
	}
	fresh := cs.mint.File(ino, 2, auth.Read, 0)
	r, att, err := cs.s.ReadChunkData(context.Background(), &weftpb.ReadChunkRequest{Chunk: cid(ino, 0), Length: 100, Capability: fresh}, nil)
	if err != nil || !r.Found || string(att.Data) != "secret data" {
		t.Fatalf("read with a fresh capability: %v %q: the refused requests changed the chunk", err, att.Data)
	}
	att.Release()
	if n := metricValue(t, cs.s.cfg.Registry, "weft_store_capability_refused_total"); n < float64(len(cases)) {
		t.Fatalf("refusals counted %v", n)
	}
}

// TestCapabilityOffAdmitsAll: without a verifier (security mode none) a
// store admits requests without capabilities, as before.
func TestCapabilityOffAdmitsAll(t *testing.T) {
	s := openStore(t, Config{Backend: "mem", MemLimit: 64 << 20})
	for op, err := range chunkOps(s, 5, nil) {
		if err != nil {
			t.Errorf("%s without capability checks: %v", op, err)
		}
	}
}

// The same-host path as another user. The machine's tests run as root, so
// the client side runs in a child process (this test binary again) as uid
// 65534, handed the file to copy into as descriptor 3.
const (
	envSameHostChild = "WEFT_TEST_SAMEHOST_CHILD"
	nobody           = 65534
)

// TestSameHostOtherUID: a same-host request from a process of another user
// is refused, even with a valid capability, unless the capability was
// minted for that user: the socket is open to every local user, and a
// capability seen by another process (a log, a core file) is no key there.
func TestSameHostOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another uid")
	}
	cs := openCapStore(t)
	const ino = 9
	root := cs.mint.File(ino, 1, auth.Read|auth.Write, 0)
	if _, err := cs.s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(ino, 0), Data: []byte("root's secret"), Capability: root}); err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	srv, err := cs.s.ServeSameHost(rpc.SameHostName(tcp.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	bin := childBinary(t)

	reply := runSameHostChild(t, bin, tcp.Addr().String(), root)
	if reply.GetErrorKind() != uint32(errs.CapabilityRefused) || reply.GetLength() != 0 {
		t.Fatalf("uid %d with root's capability: %+v, want refused", nobody, reply)
	}
	own := cs.mint.File(ino, 1, auth.Read, nobody)
	if reply := runSameHostChild(t, bin, tcp.Addr().String(), own); reply.GetError() != "" || reply.GetLength() != int64(len("root's secret")) {
		t.Fatalf("uid %d with its own capability: %+v", nobody, reply)
	}
}

// childBinary copies the test binary where uid 65534 may run it.
func childBinary(t *testing.T) string {
	dir, err := os.MkdirTemp("", "weft-samehost-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "store.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runSameHostChild runs a same-host read of chunk (9, 0) with tok as uid
// 65534 and returns the store's reply.
func runSameHostChild(t *testing.T, bin, addr string, tok []byte) *weftpb.LocalIOReply {
	t.Helper()
	out, err := os.CreateTemp("", "weft-samehost-out-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestSameHostChild$")
	cmd.Env = append(os.Environ(), envSameHostChild+"="+addr+","+fmt.Sprintf("%x", tok))
	cmd.ExtraFiles = []*os.File{out}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stdout)
	}
	var reply weftpb.LocalIOReply
	for _, line := range bytes.Split(stdout, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("REPLY ")); ok {
			var k uint32
			var n int64
			if _, err := fmt.Sscanf(string(rest), "%d %d", &k, &n); err != nil {
				t.Fatalf("child's reply %q: %v", rest, err)
			}
			reply.ErrorKind, reply.Length = k, n
			if k != 0 {
				reply.Error = string(rest)
			}
			return &reply
		}
	}
	t.Fatalf("child said nothing:\n%s", stdout)
	return nil
}

// TestSameHostChild is the child of TestSameHostOtherUID; it does nothing
// unless that test started it.
func TestSameHostChild(t *testing.T) {
	arg := os.Getenv(envSameHostChild)
	if arg == "" {
		t.Skip("run by TestSameHostOtherUID")
	}
	addr, hexTok, _ := bytes.Cut([]byte(arg), []byte(","))
	var tok []byte
	fmt.Sscanf(string(hexTok), "%x", &tok)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := rpc.DialSameHost(ctx, string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var r weftpb.LocalIOReply
	if err := conn.Call(ctx, &weftpb.LocalIORequest{Chunk: cid(9, 0), Length: 100, Capability: tok}, 3, &r); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("REPLY %d %d %s\n", r.ErrorKind, r.Length, r.Error)
}

// BenchmarkRead4KiBCapability measures what checking a capability adds to
// a small chunk read (mem backend, no wire): the worst case for its share.
func BenchmarkRead4KiBCapability(b *testing.B) {
	keys, _ := auth.NewKeyring(bytes.Repeat([]byte{7}, auth.SecretLen))
	start := time.Now()
	mint, _ := auth.NewMinter(keys, 0, time.Minute, func() time.Time { return start.Add(time.Second) })
	tok := mint.File(1, 0, auth.Read|auth.Write, 0)
	for _, bc := range []struct {
		name string
		v    *auth.Verifier
	}{{"off", nil}, {"on", auth.NewVerifier(keys, 0, func() time.Time { return start })}} {
		b.Run(bc.name, func(b *testing.B) {
			s := openStore(b, Config{Backend: "mem", MemLimit: 64 << 20, Capabilities: bc.v})
			ctx := context.Background()
			if _, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Data: make([]byte, 4096), Capability: tok}); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4096)
			for b.Loop() {
				_, att, err := s.ReadChunkData(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, 0), Length: 4096, Capability: tok}, nil)
				if err != nil {
					b.Fatal(err)
				}
				att.Release()
			}
		})
	}
}

// FuzzCapabilityRequests sends chunk requests with arbitrary capabilities
// to a store that checks them: none may panic, none but a minted token
// gets through, and every refusal is errs.CapabilityRefused. The seeds run
// with plain go test.
func FuzzCapabilityRequests(f *testing.F) {
	keys, _ := auth.NewKeyring(bytes.Repeat([]byte{7}, auth.SecretLen))
	start := time.Unix(1_700_000_000, 0) // fuzz workers must mint the same token
	now := func() time.Time { return start }
	mint, _ := auth.NewMinter(keys, 0, time.Minute, func() time.Time { return start.Add(time.Second) })
	good := mint.File(3, 0, auth.Read, 0)
	f.Add(good, uint64(3))
	f.Add(good[:40], uint64(3))
	f.Add([]byte{}, uint64(0))
	f.Add(bytes.Repeat([]byte{1}, auth.TokenLen), uint64(1))
	s := openStore(f, Config{Backend: "mem", MemLimit: 16 << 20, Capabilities: auth.NewVerifier(keys, 0, now)})
	f.Fuzz(func(t *testing.T, tok []byte, ino uint64) {
		minted := bytes.Equal(tok, good)
		for op, err := range chunkOps(s, ino, tok) {
			switch {
			case err == nil && !(minted && ino == 3 && op == "read"):
				t.Fatalf("%s on inode %d with token %x: admitted", op, ino, tok)
			case err != nil && !errs.Is(err, errs.CapabilityRefused):
				t.Fatalf("%s on inode %d: %v, want a capability refusal", op, ino, err)
			}
		}
	})
}
