// Package auth holds weft's security mechanisms: the cluster's identities
// and transport security, and the capabilities (Snapdragon, seed 001) that
// let a store check a chunk request without asking the meta server.
//
// # Capabilities
//
// A meta server that lets a caller open a file mints a capability: the
// file's inode, the chunk range and the rights it grants, when it was
// issued and when it expires, the file's generation at the time, the id of
// the key that made it and the uid of the holder, followed by an
// HMAC-SHA256 tag of all that. Stores verify the tag with the same key
// (derived from the cluster secret, so every store can check what every
// meta server minted) and refuse a request whose capability is forged,
// expired, for other chunks or rights, or revoked (revoke.go). The token is
// a fixed 90-byte layout (docs/wire.md "Capabilities"):
//
//	0  version (1)      1  rights (1)      2  key id (4)
//	6  ino (8)          14 first chunk (8) 22 last chunk (8)
//	30 issued ns (8)    38 expiry ns (8)   46 generation (8)
//	54 holder uid (4)   58 tag (32)
//
// All integers big-endian. The tag covers bytes 0-57.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"

	"github.com/weftfs/weft/internal/errs"
)

// Rights is a set of what a capability allows.
type Rights uint8

const (
	Read      Rights = 1 << iota // ReadChunk, the same-host read
	Write                        // WriteChunk, TruncateChunk, SyncChunks, the same-host write
	Delete                       // DeleteChunks and truncation by the meta server (reclaim)
	allRights = Read | Write | Delete
)

func (r Rights) String() string {
	s := ""
	for _, x := range []struct {
		r Rights
		c string
	}{{Read, "r"}, {Write, "w"}, {Delete, "d"}} {
		if r&x.r != 0 {
			s += x.c
		} else {
			s += "-"
		}
	}
	return s
}

// Capability is what a token says, once verified.
type Capability struct {
	Ino         uint64
	First, Last uint64 // the chunk indexes it covers, inclusive
	Rights      Rights
	IssuedNs    int64 // the meta server's clock when it minted
	ExpiryNs    int64
	Generation  uint64 // the file's generation when minted (revoke.go)
	KeyID       uint32
	HolderUID   uint32 // the uid of the caller it was minted for
}

const (
	capVersion = 1
	bodyLen    = 58
	tagLen     = sha256.Size
	// TokenLen is the length of every encoded capability.
	TokenLen = bodyLen + tagLen
	// SecretLen is the cluster secret's length.
	SecretLen = 32
)

// Key is one meta server's capability key: HMAC(secret, key id).
type Key struct {
	ID   uint32
	pool sync.Pool // of hash.Hash keyed with the key: hmac.New costs two block hashes
}

// deriveKey returns key id of the cluster secret.
func deriveKey(secret []byte, id uint32) *Key {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("weft capability key v1"))
	m.Write(binary.BigEndian.AppendUint32(nil, id))
	derived := m.Sum(nil)
	k := &Key{ID: id}
	k.pool.New = func() any { return hmac.New(sha256.New, derived) }
	return k
}

// tag computes the HMAC of body into out.
func (k *Key) tag(body []byte, out []byte) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	out = h.Sum(out)
	k.pool.Put(h)
	return out
}

// Keyring derives the key of any key id from the cluster secret, so a store
// can verify the capabilities of every meta server. Keys are cached: the
// number of ids is the number of meta servers.
type Keyring struct {
	secret []byte
	mu     struct {
		sync.RWMutex
		keys map[uint32]*Key
	}
}

// NewKeyring returns the keyring of a cluster secret (SecretLen bytes).
func NewKeyring(secret []byte) (*Keyring, error) {
	if len(secret) != SecretLen {
		return nil, errs.New(errs.Invalid, "capability keys", "secret of %d bytes, want %d", len(secret), SecretLen)
	}
	k := &Keyring{secret: append([]byte(nil), secret...)}
	k.mu.keys = make(map[uint32]*Key)
	return k, nil
}

// maxKeyIDs bounds the keys a keyring derives: key ids are meta server ids
// (and a rotation count above them), and a forged token must not make a
// store derive and keep a key per id it names.
const maxKeyIDs = 1 << 16

// Key returns the key with id, or nil for an id past maxKeyIDs.
func (k *Keyring) Key(id uint32) *Key {
	if id >= maxKeyIDs {
		return nil
	}
	k.mu.RLock()
	key := k.mu.keys[id]
	k.mu.RUnlock()
	if key != nil {
		return key
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key = k.mu.keys[id]; key == nil {
		key = deriveKey(k.secret, id)
		k.mu.keys[id] = key
	}
	return key
}

// Mint encodes c (its KeyID set to key's) and appends its tag.
func Mint(key *Key, c Capability) []byte {
	c.KeyID = key.ID
	b := make([]byte, bodyLen, TokenLen)
	encodeBody(b, c)
	return key.tag(b, b)
}

func encodeBody(b []byte, c Capability) {
	b[0] = capVersion
	b[1] = byte(c.Rights)
	binary.BigEndian.PutUint32(b[2:], c.KeyID)
	binary.BigEndian.PutUint64(b[6:], c.Ino)
	binary.BigEndian.PutUint64(b[14:], c.First)
	binary.BigEndian.PutUint64(b[22:], c.Last)
	binary.BigEndian.PutUint64(b[30:], uint64(c.IssuedNs))
	binary.BigEndian.PutUint64(b[38:], uint64(c.ExpiryNs))
	binary.BigEndian.PutUint64(b[46:], c.Generation)
	binary.BigEndian.PutUint32(b[54:], c.HolderUID)
}

// Decode parses a token without checking its tag: for logs and tests, and
// the first step of Verify. A token of another length or version, with
// unknown rights or an empty range, is errs.CapabilityRefused (malformed).
func Decode(tok []byte) (Capability, error) {
	switch {
	case len(tok) == 0:
		return Capability{}, refused(ReasonMissing, "no capability")
	case len(tok) != TokenLen:
		return Capability{}, refused(ReasonMalformed, "capability of %d bytes, want %d", len(tok), TokenLen)
	case tok[0] != capVersion:
		return Capability{}, refused(ReasonMalformed, "capability version %d, want %d", tok[0], capVersion)
	case Rights(tok[1])&^allRights != 0:
		return Capability{}, refused(ReasonMalformed, "unknown rights %#x", tok[1])
	}
	c := Capability{
		Rights:     Rights(tok[1]),
		KeyID:      binary.BigEndian.Uint32(tok[2:]),
		Ino:        binary.BigEndian.Uint64(tok[6:]),
		First:      binary.BigEndian.Uint64(tok[14:]),
		Last:       binary.BigEndian.Uint64(tok[22:]),
		IssuedNs:   int64(binary.BigEndian.Uint64(tok[30:])),
		ExpiryNs:   int64(binary.BigEndian.Uint64(tok[38:])),
		Generation: binary.BigEndian.Uint64(tok[46:]),
		HolderUID:  binary.BigEndian.Uint32(tok[54:]),
	}
	if c.First > c.Last || c.IssuedNs > c.ExpiryNs {
		return Capability{}, refused(ReasonMalformed, "empty chunk range or lifetime")
	}
	return c, nil
}

// Want is what a request needs of a capability: one of Rights (a deletion
// takes Write or Delete) over chunks [First, Last] of Ino, at time NowNs.
type Want struct {
	Ino         uint64
	First, Last uint64
	Rights      Rights
	NowNs       int64
}

// Verify checks a token's tag with the keyring and that it grants want; it
// returns what the token says. It does not know revocations (Verifier
// does). The tag comparison takes constant time.
func Verify(keys *Keyring, tok []byte, want Want) (Capability, error) {
	c, err := Decode(tok)
	if err != nil {
		return Capability{}, err
	}
	key := keys.Key(c.KeyID)
	if key == nil {
		return Capability{}, refused(ReasonUnknownKey, "unknown key id %d", c.KeyID)
	}
	var buf [tagLen]byte
	if !hmac.Equal(key.tag(tok[:bodyLen], buf[:0]), tok[bodyLen:]) {
		return Capability{}, refused(ReasonForged, "capability tag does not match (forged or altered)")
	}
	switch {
	case want.NowNs >= c.ExpiryNs:
		return Capability{}, refused(ReasonExpired, "capability for inode %d expired %dms ago", c.Ino, (want.NowNs-c.ExpiryNs)/1e6)
	case c.Ino != want.Ino:
		return Capability{}, refused(ReasonWrongInode, "capability for inode %d, not %d", c.Ino, want.Ino)
	case want.First < c.First || want.Last > c.Last:
		return Capability{}, refused(ReasonWrongRange, "capability for chunks %d-%d of inode %d, not %d-%d", c.First, c.Last, c.Ino, want.First, want.Last)
	case c.Rights&want.Rights == 0:
		return Capability{}, refused(ReasonWrongRights, "capability grants %v on inode %d, the request needs %v", c.Rights, c.Ino, want.Rights)
	}
	return c, nil
}
