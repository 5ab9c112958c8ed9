package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Key ids. Meta server i mints with key id i (below 1<<12, core.MaxServers);
// store i mints with StoreKeyBase+i for its repair pass, and the admin
// tools (weft repair, gc, fsck) with AdminKeyID. Every holder of the
// cluster secret can derive every key: the ids say who minted, for logs.
const (
	StoreKeyBase = 1 << 13
	AdminKeyID   = 1 << 15
)

// LoadMinter loads the cluster secret at path and returns a minter with key
// id; an empty path means capabilities are off, and a nil minter.
func LoadMinter(path string, id uint32) (*Minter, *Keyring, error) {
	if path == "" {
		return nil, nil, nil
	}
	secret, err := LoadSecret(path)
	if err != nil {
		return nil, nil, err
	}
	keys, err := NewKeyring(secret)
	if err != nil {
		return nil, nil, err
	}
	m, err := NewMinter(keys, id, 0, nil)
	return m, keys, err
}

// Minter is a meta server's side: it makes capabilities with its own key.
type Minter struct {
	key      *Key
	lifetime time.Duration
	now      func() time.Time
}

// NewMinter mints with key id (the meta server's id) of keys, each
// capability lasting lifetime (0: DefaultLifetime; at most MaxLifetime).
func NewMinter(keys *Keyring, id uint32, lifetime time.Duration, now func() time.Time) (*Minter, error) {
	if lifetime == 0 {
		lifetime = DefaultLifetime
	}
	if lifetime < 0 || lifetime > MaxLifetime {
		return nil, errs.New(errs.Invalid, "capability minter", "lifetime %v not in 0..%v", lifetime, MaxLifetime)
	}
	key := keys.Key(id)
	if key == nil {
		return nil, errs.New(errs.Invalid, "capability minter", "key id %d too large", id)
	}
	if now == nil {
		now = time.Now
	}
	return &Minter{key: key, lifetime: lifetime, now: now}, nil
}

// File mints a capability for every chunk of ino with rights, for uid,
// at the file's generation gen.
func (m *Minter) File(ino, gen uint64, rights Rights, uid uint32) []byte {
	now := m.now().UnixNano()
	return Mint(m.key, Capability{Ino: ino, First: 0, Last: math.MaxUint64, Rights: rights,
		IssuedNs: now, ExpiryNs: now + int64(m.lifetime), Generation: gen, HolderUID: uid})
}

// Renew mints a successor of prev, a capability this minter made (its tag
// checks with this minter's key; it may have expired), for the same file,
// holder and generation gen, with rights (a subset of prev's). uid is the
// caller's: the holder's or root. For a file that has no record left to
// check access with (unlinked while open).
func (m *Minter) Renew(prev []byte, ino, gen uint64, rights Rights, uid uint32) ([]byte, error) {
	c, err := Decode(prev)
	if err != nil {
		return nil, err
	}
	var buf [tagLen]byte
	switch {
	case c.KeyID != m.key.ID || !hmac.Equal(m.key.tag(prev[:bodyLen], buf[:0]), prev[bodyLen:]):
		return nil, refused(ReasonForged, "capability to renew was not minted here")
	case c.Ino != ino:
		return nil, refused(ReasonWrongInode, "capability to renew is for inode %d, not %d", c.Ino, ino)
	case c.Generation != gen:
		return nil, refused(ReasonRevoked, "capability to renew was revoked (generation %d, file at %d)", c.Generation, gen)
	case uid != 0 && uid != c.HolderUID:
		return nil, refused(ReasonWrongHolder, "capability to renew belongs to uid %d, not %d", c.HolderUID, uid)
	case rights&^c.Rights != 0:
		return nil, refused(ReasonWrongRights, "capability to renew grants %v, not %v", c.Rights, rights)
	}
	return m.File(ino, gen, rights, c.HolderUID), nil
}

// Service mints a capability for a server's own chunk calls (reclaim,
// repair, gc): every chunk of ino, with rights, at the highest generation
// (revocations are for clients). A nil minter (capabilities off) mints nil.
func (m *Minter) Service(ino uint64, rights Rights) []byte {
	if m == nil {
		return nil
	}
	return m.File(ino, math.MaxUint64, rights, 0)
}

// Verifier is a store's side: tags, rights, expiry and revocations.
type Verifier struct {
	keys    *Keyring
	revoked *RevocationSet
	now     func() time.Time
}

// NewVerifier checks capabilities with keys; its revocation set holds at
// most maxRevocations entries (0: the default) and starts with its floor
// at now (a store forgot the revocations of its previous run).
func NewVerifier(keys *Keyring, maxRevocations int, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{keys: keys, revoked: NewRevocationSet(maxRevocations, now().UnixNano()), now: now}
}

// Check verifies tok for rights over chunks [first, last] of ino.
func (v *Verifier) Check(tok []byte, ino, first, last uint64, rights Rights) (Capability, error) {
	c, err := Verify(v.keys, tok, Want{Ino: ino, First: first, Last: last, Rights: rights, NowNs: v.now().UnixNano()})
	if err != nil {
		return Capability{}, err
	}
	if c.ExpiryNs-c.IssuedNs > int64(MaxLifetime) {
		// Revocation entries live MaxLifetime: a longer-lived capability
		// would outlive its revocation.
		return Capability{}, refused(ReasonMalformed, "capability lifetime over %v", MaxLifetime)
	}
	if err := v.revoked.Check(c); err != nil {
		return Capability{}, err
	}
	return c, nil
}

// Revoke applies a revocation pushed by a meta server.
func (v *Verifier) Revoke(ino, gen uint64, atNs int64) {
	v.revoked.Revoke(ino, gen, atNs, v.now().UnixNano())
}

// Revocations returns the revocation set (metrics, tests).
func (v *Verifier) Revocations() *RevocationSet { return v.revoked }

// LoadSecret reads the cluster's capability secret from path: SecretLen
// bytes in a file no one but its owner may read.
func LoadSecret(path string) ([]byte, error) {
	const op = "load capability secret"
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errs.Wrap(errs.NotExist, op, path, err)
	}
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, errs.New(errs.Permission, op, "%s is open to other users (mode %v): want 0600", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, path, err)
	}
	if len(b) != SecretLen {
		return nil, errs.New(errs.Invalid, op, "%s holds %d bytes, want %d", path, len(b), SecretLen)
	}
	return b, nil
}

// CreateSecret writes a new random secret to path (mode 0600) unless a file
// is there already, which it leaves alone.
func CreateSecret(path string) error {
	const op = "create capability secret"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.IO, op, path, err)
	}
	secret := make([]byte, SecretLen)
	rand.Read(secret)
	_, err = f.Write(secret)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return errs.Wrap(errs.IO, op, path, err)
	}
	return nil
}
