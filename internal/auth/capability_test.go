package auth

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

func testKeys(t testing.TB, fill byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(bytes.Repeat([]byte{fill}, SecretLen))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestVerifyRefusals: each way a capability can be wrong is refused with
// errs.CapabilityRefused and its own reason.
func TestVerifyRefusals(t *testing.T) {
	keys := testKeys(t, 1)
	now := time.Unix(1_700_000_000, 0).UnixNano()
	good := Capability{Ino: 42, First: 2, Last: 5, Rights: Read | Write, IssuedNs: now - 1e9, ExpiryNs: now + 60e9, Generation: 3, HolderUID: 1000}
	tok := Mint(keys.Key(7), good)
	want := Want{Ino: 42, First: 3, Last: 4, Rights: Write, NowNs: now}
	c, err := Verify(keys, tok, want)
	if err != nil {
		t.Fatalf("good capability: %v", err)
	}
	good.KeyID = 7
	if c != good {
		t.Fatalf("verified %+v, minted %+v", c, good)
	}

	flip := func(i int) []byte { b := bytes.Clone(tok); b[i] ^= 1; return b }
	other := Mint(testKeys(t, 2).Key(7), good) // another cluster's secret
	expired := Mint(keys.Key(7), Capability{Ino: 42, First: 2, Last: 5, Rights: Read | Write, IssuedNs: now - 10e9, ExpiryNs: now - 1})
	for _, tc := range []struct {
		name   string
		tok    []byte
		want   Want
		reason Reason
	}{
		{"none", nil, want, ReasonMissing},
		{"short", tok[:TokenLen-1], want, ReasonMalformed},
		{"version", flip(0), want, ReasonMalformed},
		{"rights bits", func() []byte { b := bytes.Clone(tok); b[1] = 0x80; return b }(), want, ReasonMalformed},
		{"altered ino", flip(13), want, ReasonForged},
		{"altered rights", func() []byte { b := bytes.Clone(tok); b[1] = byte(allRights); return b }(), want, ReasonForged},
		{"altered tag", flip(TokenLen - 1), want, ReasonForged},
		{"foreign secret", other, want, ReasonForged},
		{"unknown key id", func() []byte { b := bytes.Clone(tok); b[2] = 0xff; return b }(), want, ReasonUnknownKey},
		{"expired", expired, want, ReasonExpired},
		{"other inode", tok, Want{Ino: 43, First: 3, Last: 3, Rights: Read, NowNs: now}, ReasonWrongInode},
		{"below range", tok, Want{Ino: 42, First: 1, Last: 3, Rights: Read, NowNs: now}, ReasonWrongRange},
		{"above range", tok, Want{Ino: 42, First: 5, Last: 6, Rights: Read, NowNs: now}, ReasonWrongRange},
		{"no delete right", tok, Want{Ino: 42, First: 2, Last: 2, Rights: Delete, NowNs: now}, ReasonWrongRights},
	} {
		_, err := Verify(keys, tc.tok, tc.want)
		if !errs.Is(err, errs.CapabilityRefused) || ReasonOf(err) != tc.reason {
			t.Errorf("%s: got %v (reason %v), want %v", tc.name, err, ReasonOf(err), tc.reason)
		}
	}
	ro := Mint(keys.Key(7), Capability{Ino: 42, Last: math.MaxUint64, Rights: Read, IssuedNs: now, ExpiryNs: now + 1e9})
	if _, err := Verify(keys, ro, want); ReasonOf(err) != ReasonWrongRights {
		t.Errorf("read-only capability for a write: %v", err)
	}
}

// TestVerifierRevocation: a generation bump refuses older capabilities and
// keeps newer ones; the floor refuses what was minted before the store
// started; a capability living longer than MaxLifetime is refused.
func TestVerifierRevocation(t *testing.T) {
	keys := testKeys(t, 1)
	clock := time.Unix(1_700_000_000, 0)
	v := NewVerifier(keys, 0, func() time.Time { return clock })
	m, err := NewMinter(keys, 3, 0, func() time.Time { return clock.Add(2 * FloorSlack) })
	if err != nil {
		t.Fatal(err)
	}
	old := m.File(9, 1, Read, 0)
	if _, err := v.Check(old, 9, 0, 0, Read); err != nil {
		t.Fatalf("fresh capability: %v", err)
	}
	v.Revoke(9, 2, clock.Add(2*FloorSlack).UnixNano())
	if _, err := v.Check(old, 9, 0, 0, Read); ReasonOf(err) != ReasonRevoked {
		t.Fatalf("capability of generation 1 after a revocation to 2: %v", err)
	}
	if _, err := v.Check(m.File(9, 2, Read, 0), 9, 0, 0, Read); err != nil {
		t.Fatalf("capability of the new generation: %v", err)
	}
	if _, err := v.Check(m.File(10, 1, Read, 0), 10, 0, 0, Read); err != nil {
		t.Fatalf("another file's capability: %v", err)
	}
	before := Mint(keys.Key(3), Capability{Ino: 11, Last: 1, Rights: Read, IssuedNs: clock.UnixNano() - 1, ExpiryNs: clock.UnixNano() + 1e9})
	if _, err := v.Check(before, 11, 0, 0, Read); ReasonOf(err) != ReasonRevoked {
		t.Fatalf("capability minted before the store started: %v", err)
	}
	t0 := clock.Add(2 * FloorSlack).UnixNano()
	long := Mint(keys.Key(3), Capability{Ino: 11, Last: 1, Rights: Read, IssuedNs: t0, ExpiryNs: t0 + int64(MaxLifetime) + 1})
	if _, err := v.Check(long, 11, 0, 0, Read); ReasonOf(err) != ReasonMalformed {
		t.Fatalf("capability with a lifetime over the maximum: %v", err)
	}
}

// TestRevocationSetBounded: entries expire after MaxLifetime, and a full
// set evicts its oldest entry and raises the floor over it, so that the
// evicted revocation still holds.
func TestRevocationSetBounded(t *testing.T) {
	const limit = 4
	r := NewRevocationSet(limit, 0)
	base := int64(1e15)
	for i := range uint64(limit) {
		r.Revoke(i, 5, base+int64(i), base)
	}
	if r.Len() != limit {
		t.Fatalf("%d entries, want %d", r.Len(), limit)
	}
	r.Revoke(100, 5, base+100, base) // evicts ino 0
	if r.Len() != limit {
		t.Fatalf("%d entries after eviction, want %d", r.Len(), limit)
	}
	// Ino 0's old generation, issued before the eviction's floor: refused.
	if err := r.Check(Capability{Ino: 0, Generation: 4, IssuedNs: base}); ReasonOf(err) != ReasonRevoked {
		t.Fatalf("evicted revocation no longer holds: %v", err)
	}
	if err := r.Check(Capability{Ino: 0, Generation: 5, IssuedNs: base + 2*int64(FloorSlack)}); err != nil {
		t.Fatalf("a capability issued after the floor: %v", err)
	}
	// Repeated revocations of one file keep one entry and a bounded queue.
	for g := uint64(6); g < 1000; g++ {
		r.Revoke(1, g, base+int64(g), base)
	}
	if r.Len() > limit || len(r.mu.queue) > 2*limit+1 {
		t.Fatalf("%d entries, queue %d", r.Len(), len(r.mu.queue))
	}
	// After MaxLifetime every entry can go.
	r.Revoke(200, 1, base+int64(2*MaxLifetime), base+int64(2*MaxLifetime))
	if r.Len() != 1 {
		t.Fatalf("%d entries after they all expired, want 1", r.Len())
	}
}

func TestSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capability.key")
	if _, err := LoadSecret(path); !errs.Is(err, errs.NotExist) {
		t.Fatalf("missing secret: %v", err)
	}
	if err := CreateSecret(path); err != nil {
		t.Fatal(err)
	}
	a, err := LoadSecret(path)
	if err != nil || len(a) != SecretLen {
		t.Fatalf("load: %v (%d bytes)", err, len(a))
	}
	if err := CreateSecret(path); err != nil { // leaves it alone
		t.Fatal(err)
	}
	if b, _ := LoadSecret(path); !bytes.Equal(a, b) {
		t.Fatal("a second CreateSecret replaced the secret")
	}
	os.Chmod(path, 0o644)
	if _, err := LoadSecret(path); !errs.Is(err, errs.Permission) {
		t.Fatalf("world-readable secret: %v", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	keys := testKeys(b, 1)
	now := time.Now()
	v := NewVerifier(keys, 0, func() time.Time { return now })
	m, _ := NewMinter(keys, 1, 0, func() time.Time { return now.Add(2 * FloorSlack) })
	tok := m.File(42, 1, Read|Write, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.Check(tok, 42, 7, 7, Write); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMint(b *testing.B) {
	m, _ := NewMinter(testKeys(b, 1), 1, 0, nil)
	b.ReportAllocs()
	for b.Loop() {
		m.File(42, 1, Read|Write, 0)
	}
}
