package meta

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// capEnv is a meta server that mints capabilities, with a store stand-in
// that applies the revocations it pushes to a verifier of the same cluster
// secret (meta never imports store, even in tests).
type capEnv struct {
	*env
	verifier *auth.Verifier
	pushes   chan struct{}
	pub      uint64      // a directory everyone may create in
	down     atomic.Bool // the store stand-in refuses revocations
}

func newCapEnv(t testing.TB) *capEnv {
	t.Helper()
	keys, err := auth.NewKeyring(bytes.Repeat([]byte{3}, auth.SecretLen))
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	ce := &capEnv{pushes: make(chan struct{}, 1000)}
	mux := rpc.NewMux()
	rpc.Handle(mux, weftpb.MethodRevokeCapabilities, func(_ context.Context, req *weftpb.RevokeCapabilitiesRequest) (*weftpb.RevokeCapabilitiesReply, error) {
		if ce.down.Load() {
			return nil, errs.New(errs.Unavailable, "revoke capabilities", "store down")
		}
		for _, r := range req.Revocations {
			ce.verifier.Revoke(r.Ino, r.Generation, r.RevokedAtNs)
		}
		select {
		case ce.pushes <- struct{}{}:
		default:
		}
		return &weftpb.RevokeCapabilitiesReply{}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ce.env = newEnv(t, func(c *Config) {
		clock = &fakeClock{now: c.Now()}
		ce.verifier = auth.NewVerifier(keys, 0, clock.Now)
		c.Capabilities, err = auth.NewMinter(keys, uint32(c.ID), 0, c.Now)
		c.Stores = []string{ln.Addr().String()}
	})
	if err != nil {
		t.Fatal(err)
	}
	ce.pub = ce.mkdir(rootCreds(), root, "pub", 0o777).Ino
	return ce
}

// check verifies tok for right over chunk 0 of ino at the store stand-in.
func (ce *capEnv) check(tok []byte, ino uint64, right auth.Rights) error {
	_, err := ce.verifier.Check(tok, ino, 0, 0, right)
	return err
}

func (ce *capEnv) open(c *weftpb.Creds, ref *weftpb.NodeRef, flags uint32) []byte {
	ce.t.Helper()
	r, err := ce.Open(ctx, &weftpb.OpenRequest{Creds: c, Node: ref, Flags: flags})
	if err != nil {
		ce.t.Fatalf("open: %v", err)
	}
	return r.Capability
}

// TestCapabilitiesMinted: open, create and lookup carry capabilities whose
// rights follow the open mode (lookup: read), for the caller's uid; a
// directory gets none.
func TestCapabilitiesMinted(t *testing.T) {
	ce := newCapEnv(t)
	cr, err := ce.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: ce.pub, Name: "f", Mode: core.ModeFile | 0o444, Exclusive: true, OpenFlags: oWrOnly})
	if err != nil {
		t.Fatal(err)
	}
	ino := cr.Attr.Ino
	if err := ce.check(cr.Capability, ino, auth.Write); err != nil {
		t.Fatalf("create with O_WRONLY and mode 0444: %v", err)
	}
	if c, _ := auth.Decode(cr.Capability); c.HolderUID != 1000 {
		t.Fatalf("holder %d, want alice", c.HolderUID)
	}
	ref := fileRef(ce.pub, "f", ino)
	ro := ce.open(alice, ref, oRdOnly)
	if ce.check(ro, ino, auth.Read) != nil || !errs.Is(ce.check(ro, ino, auth.Write), errs.CapabilityRefused) {
		t.Fatal("a read-only open's capability is not read-only")
	}
	lr, err := ce.Lookup(ctx, &weftpb.LookupRequest{Creds: bob, Parent: ce.pub, Name: "f"})
	if err != nil || ce.check(lr.Capability, ino, auth.Read) != nil {
		t.Fatalf("lookup: %v", err)
	}
	ce.mkdir(rootCreds(), root, "d", 0o755)
	if lr, err := ce.Lookup(ctx, &weftpb.LookupRequest{Creds: bob, Parent: root, Name: "d"}); err != nil || lr.Capability != nil {
		t.Fatalf("lookup of a directory: %v, capability %x", err, lr.GetCapability())
	}
}

// TestChmodRevokes: a chmod that takes a permission away, a chown and a
// shrinking truncate each revoke the file's older
// capabilities at the stores before they answer; a chmod that only adds
// bits does not. GetCapability then re-checks permissions, with the owner
// always allowed.
func TestChmodRevokes(t *testing.T) {
	ce := newCapEnv(t)
	ino := ce.create(alice, ce.pub, "f", core.ModeFile|0o644).Ino
	ref := fileRef(ce.pub, "f", ino)
	bobs := ce.open(bob, ref, oRdOnly)
	if err := ce.check(bobs, ino, auth.Read); err != nil {
		t.Fatal(err)
	}
	if err := ce.chmod(alice, ref, 0o666); err != nil { // adds bits
		t.Fatal(err)
	}
	if err := ce.check(bobs, ino, auth.Read); err != nil {
		t.Fatalf("after a chmod that only adds bits: %v", err)
	}
	if err := ce.chmod(alice, ref, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ce.check(bobs, ino, auth.Read); auth.ReasonOf(err) != auth.ReasonRevoked {
		t.Fatalf("bob's capability after chmod 600: %v, want revoked", err)
	}
	_, err := ce.GetCapability(ctx, &weftpb.GetCapabilityRequest{Creds: bob, Node: ref, Rights: uint32(auth.Read)})
	wantKind(t, err, errs.Permission)

	// The owner keeps access (NFS's owner override) and gets the new
	// generation.
	if err := ce.chmod(alice, ref, 0); err != nil {
		t.Fatal(err)
	}
	gr, err := ce.GetCapability(ctx, &weftpb.GetCapabilityRequest{Creds: alice, Node: ref, Rights: uint32(auth.Read | auth.Write)})
	if err != nil || ce.check(gr.Capability, ino, auth.Write) != nil {
		t.Fatalf("owner's fresh capability after chmod 000: %v", err)
	}
	if err := ce.chmod(alice, ref, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"chown", func() error {
			_, err := ce.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: ref, Valid: uint32(weftpb.SetAttrBits_SETATTR_GID), Gid: 5})
			return err
		}},
		{"truncate", func() error {
			if _, err := ce.Commit(ctx, &weftpb.CommitRequest{Creds: alice, Node: ref, Size: 10, Inline: true, InlineData: make([]byte, 10)}); err != nil {
				return err
			}
			before := ce.open(alice, ref, oRdWr)
			_, err := ce.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: alice, Node: ref, Valid: uint32(weftpb.SetAttrBits_SETATTR_SIZE), Size: 2, ByHandle: true})
			if err == nil && ce.check(before, ino, auth.Read) == nil {
				t.Errorf("a capability from before the truncate still verifies")
			}
			return err
		}},
	} {
		before := ce.open(rootCreds(), ref, oRdOnly)
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if err := ce.check(before, ino, auth.Read); auth.ReasonOf(err) != auth.ReasonRevoked {
			t.Errorf("after %s: %v, want revoked", step.name, err)
		}
		if err := ce.check(ce.open(rootCreds(), ref, oRdOnly), ino, auth.Read); err != nil {
			t.Errorf("a capability from after %s: %v", step.name, err)
		}
	}
}

// BenchmarkChmod compares a chmod that revokes (it takes a bit away, so the
// server pushes a revocation to the store before it answers) with one that
// does not (same batch and fsync, no push).
func BenchmarkChmod(b *testing.B) {
	for _, bc := range []struct {
		name  string
		modes [2]uint32
	}{
		{"revoking", [2]uint32{0o640, 0o604}}, // each removes a read bit
		{"non-revoking", [2]uint32{0o644, 0o644}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ce := newCapEnv(b)
			ino := ce.create(alice, ce.pub, "f", core.ModeFile|0o644).Ino
			ref := fileRef(ce.pub, "f", ino)
			i := 0
			for b.Loop() {
				if err := ce.chmod(alice, ref, bc.modes[i%2]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkGetCapability is the meta server's side of fetching a fresh
// capability (without the network).
func BenchmarkGetCapability(b *testing.B) {
	ce := newCapEnv(b)
	ino := ce.create(alice, ce.pub, "f", core.ModeFile|0o644).Ino
	req := &weftpb.GetCapabilityRequest{Creds: alice, Node: fileRef(ce.pub, "f", ino), Rights: uint32(auth.Read | auth.Write)}
	for b.Loop() {
		if _, err := ce.GetCapability(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRenewHeldCapability: a file unlinked while its holder has it open has
// no record to check access with; its holder renews the capability it had
// (for its uid, at the generation the file had), and nobody else does.
func TestRenewHeldCapability(t *testing.T) {
	ce := newCapEnv(t)
	ino := ce.create(alice, ce.pub, "f", core.ModeFile|0o644).Ino
	ref := fileRef(ce.pub, "f", ino)
	mine := ce.open(alice, ref, oRdWr)
	bobs := ce.open(bob, ref, oRdOnly)
	if err := ce.chmod(alice, ref, 0o600); err != nil { // revokes bob's
		t.Fatal(err)
	}
	mine2 := ce.open(alice, ref, oRdWr)
	if _, err := ce.Unlink(ctx, &weftpb.UnlinkRequest{Creds: alice, Parent: ce.pub, Name: "f", Open: []uint64{ino}}); err != nil {
		t.Fatal(err)
	}
	renew := func(c *weftpb.Creds, prev []byte, rights auth.Rights) ([]byte, error) {
		r, err := ce.GetCapability(ctx, &weftpb.GetCapabilityRequest{Creds: c, Node: ref, Rights: uint32(rights), Previous: prev})
		return r.GetCapability(), err
	}
	tok, err := renew(alice, mine2, auth.Read|auth.Write)
	if err != nil || ce.check(tok, ino, auth.Write) != nil {
		t.Fatalf("the holder's renewal: %v", err)
	}
	if _, err := renew(bob, mine2, auth.Read); !errs.Is(err, errs.Permission) {
		t.Fatalf("another user's renewal of the holder's capability: %v", err)
	}
	if _, err := renew(bob, bobs, auth.Read); !errs.Is(err, errs.Permission) {
		t.Fatalf("renewal of a capability revoked before the unlink: %v", err)
	}
	if _, err := renew(alice, mine, auth.Read); !errs.Is(err, errs.Permission) {
		t.Fatalf("renewal of the holder's own capability from before the chmod: %v", err)
	}
	if _, err := renew(alice, nil, auth.Read); !errs.Is(err, errs.NotExist) && !errs.Is(err, errs.Stale) {
		t.Fatalf("renewal without a previous capability: %v", err)
	}
}

// TestRevocationRetried: a store that refused a revocation (down) gets it
// once it is back, without another change to the file.
func TestRevocationRetried(t *testing.T) {
	ce := newCapEnv(t)
	ino := ce.create(alice, ce.pub, "f", core.ModeFile|0o644).Ino
	ref := fileRef(ce.pub, "f", ino)
	bobs := ce.open(bob, ref, oRdOnly)
	ce.down.Store(true)
	if err := ce.chmod(alice, ref, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ce.check(bobs, ino, auth.Read); err != nil {
		t.Fatalf("a store that was down revoked: %v", err)
	}
	ce.down.Store(false)
	waitfor.NoError(t, 10*time.Second, "the revocation reaches the store", func() error {
		if err := ce.check(bobs, ino, auth.Read); auth.ReasonOf(err) != auth.ReasonRevoked {
			return errors.New("not yet")
		}
		return nil
	})
}
