package auth

import (
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// FuzzDecodeCapability feeds arbitrary tokens to Decode and Verify: none may
// panic, every refusal is errs.CapabilityRefused with a reason, and no
// token but a minted one verifies. The corpus in testdata/fuzz runs with
// plain go test.
func FuzzDecodeCapability(f *testing.F) {
	keys := testKeys(f, 1)
	now := time.Unix(1_700_000_000, 0).UnixNano()
	f.Add(Mint(keys.Key(0), Capability{Ino: 1, Last: 10, Rights: Read, IssuedNs: now, ExpiryNs: now + 1e9}), uint64(1), uint64(3))
	f.Add([]byte{}, uint64(0), uint64(0))
	f.Add(make([]byte, TokenLen), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, tok []byte, ino, index uint64) {
		c, derr := Decode(tok)
		if derr != nil && (!errs.Is(derr, errs.CapabilityRefused) || ReasonOf(derr) == 0) {
			t.Fatalf("decode refusal without a reason: %v", derr)
		}
		if derr == nil && (c.First > c.Last || c.Rights&^allRights != 0) {
			t.Fatalf("decoded an invalid capability %+v", c)
		}
		got, err := Verify(keys, tok, Want{Ino: ino, First: index, Last: index, Rights: Read, NowNs: now})
		if err == nil {
			// Only the seed minted above verifies: anything else passing
			// would be a forgery.
			if got.Ino != 1 || got.KeyID != 0 || index > 10 {
				t.Fatalf("verified %+v for inode %d chunk %d", got, ino, index)
			}
			return
		}
		if !errs.Is(err, errs.CapabilityRefused) || ReasonOf(err) == 0 {
			t.Fatalf("refusal without a reason: %v", err)
		}
	})
}
