package client

import (
	"container/list"
	"hash/crc32"
	"sync"

	"github.com/weftfs/weft/internal/core"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// The chunk cache keeps whole chunks of files this client read, across
// opens, so that a file read again (seed 000's Read50x reads each file 50
// times) comes from memory instead of its stores: over a wide-area link a
// chunk read costs a round trip and the link's bandwidth, and an edge meta
// server (internal/edge) saves the metadata round trips only.
//
// Coherence. A chunk is kept with the version of the file it was read
// under: size, mtime and ctime as the meta server last said (at open, or at
// the refresh of a stale open, refresh.go). It is served only to an open
// state that holds the same version from the server and has no change of
// its own since (openInode.cacheVersionLocked). Every change of a file's
// content is committed with a new ctime, which the server sets itself and
// no client can set back (utimes sets mtime, not ctime), so a read after
// another client's close finds a new version at its open and misses:
// close-to-open, as without the cache. With leases, an open covered by its
// lease reads under that lease, and a recall marks the open state stale, so
// the next read takes the server's view again before it may use the cache:
// the same bound as the kernel's page cache the FUSE mount keeps across
// opens (fusefs openFlags), and as reads without the cache.
//
// Bound and integrity. The cache holds at most Config.ReadCache bytes of
// chunk data, least recently used first out. Each chunk is a copy owned by
// the cache (never a pooled buffer) and is checked against the CRC-32C
// taken when it went in before every use: a chunk that no longer matches is
// dropped and read from the stores again, never served.
//
// Security. The cache is the client's own memory: it serves only reads of
// handles that this client opened, which the meta server allowed (the open
// checks the caller's rights and hands out the capability the stores
// check). It crosses no process boundary.

// DefaultReadCache is Config.ReadCache's default: 64 MiB of chunks.
const DefaultReadCache = 64 << 20

// cacheVersion is what a cached chunk is valid for: the file's size and
// times as the meta server last reported them.
type cacheVersion struct {
	size             uint64
	mtimeNs, ctimeNs int64
}

func versionOf(a *pb.Attr) cacheVersion {
	return cacheVersion{size: a.GetSize(), mtimeNs: a.GetMtimeNs(), ctimeNs: a.GetCtimeNs()}
}

type chunkKey struct {
	ino   core.Ino
	index uint64
}

type cachedChunk struct {
	key     chunkKey
	version cacheVersion
	data    []byte
	sum     uint32 // CRC-32C of data when it went in
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkCache is a bounded LRU of whole chunks; nil is a cache that keeps
// nothing.
type chunkCache struct {
	limit int64
	mu    struct {
		sync.Mutex
		used    int64
		lru     list.List // of *cachedChunk, most recently used first
		byKey   map[chunkKey]*list.Element
		hits    uint64
		corrupt uint64
	}
}

// newChunkCache returns a cache of limit bytes, or nil for limit ≤ 0.
func newChunkCache(limit int64) *chunkCache {
	if limit <= 0 {
		return nil
	}
	cc := &chunkCache{limit: limit}
	cc.mu.byKey = make(map[chunkKey]*list.Element)
	return cc
}

// get returns chunk key if it is cached for version v and intact. The data
// is the cache's: the caller must not write it. A chunk of another version
// is dropped: the reader asking has heard of a newer version, or will
// (versions only move forward), and the chunk serves no one for long.
func (cc *chunkCache) get(key chunkKey, v cacheVersion) ([]byte, bool) {
	if cc == nil {
		return nil, false
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e := cc.mu.byKey[key]
	if e == nil {
		return nil, false
	}
	ch := e.Value.(*cachedChunk)
	if ch.version != v {
		cc.removeLocked(e)
		return nil, false
	}
	if crc32.Checksum(ch.data, castagnoli) != ch.sum {
		cc.mu.corrupt++
		cc.removeLocked(e)
		return nil, false
	}
	cc.mu.lru.MoveToFront(e)
	cc.mu.hits++
	return ch.data, true
}

// put keeps a copy of data as chunk key of version v, evicting the least
// recently used chunks beyond the bound.
func (cc *chunkCache) put(key chunkKey, v cacheVersion, data []byte) {
	if cc == nil || int64(len(data)) > cc.limit {
		return
	}
	ch := &cachedChunk{key: key, version: v, data: append([]byte(nil), data...)}
	ch.sum = crc32.Checksum(ch.data, castagnoli)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if e := cc.mu.byKey[key]; e != nil {
		cc.removeLocked(e)
	}
	cc.mu.byKey[key] = cc.mu.lru.PushFront(ch)
	cc.mu.used += int64(len(ch.data))
	for cc.mu.used > cc.limit {
		cc.removeLocked(cc.mu.lru.Back())
	}
}

func (cc *chunkCache) removeLocked(e *list.Element) {
	ch := cc.mu.lru.Remove(e).(*cachedChunk)
	delete(cc.mu.byKey, ch.key)
	cc.mu.used -= int64(len(ch.data))
}

// ChunkCacheStats is what the chunk cache holds and has served.
type ChunkCacheStats struct {
	Bytes, Chunks int64
	Hits          uint64 // chunks served from the cache
	Corrupt       uint64 // chunks dropped because their checksum no longer matched
}

// ChunkCacheStats reports the client's chunk cache (zero without one).
func (c *Client) ChunkCacheStats() ChunkCacheStats {
	cc := c.chunks
	if cc == nil {
		return ChunkCacheStats{}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return ChunkCacheStats{Bytes: cc.mu.used, Chunks: int64(cc.mu.lru.Len()), Hits: cc.mu.hits, Corrupt: cc.mu.corrupt}
}

// cacheVersionLocked returns the version under which this open state may
// use the chunk cache: the server's, taken at open or refresh, while
// nothing since may have changed the content as this client sees it (a
// write of its own, a recall not yet followed by a refresh). Inline files
// have no chunks.
func (n *openInode) cacheVersionLocked() (cacheVersion, bool) {
	ok := n.c.chunks != nil && n.mu.cacheVerOK && n.mu.cacheVerGen == n.mu.gen &&
		!n.staleLocked() && !n.mu.modified && n.mu.buffered == 0 && !n.mu.inline && !n.mu.freed
	return n.mu.cacheVer, ok
}

// takeVersionLocked records the server's version of the file (an open or
// refresh reply), which the chunk cache is used under until the next
// change of this client's.
func (n *openInode) takeVersionLocked(a *pb.Attr) {
	n.mu.cacheVer, n.mu.cacheVerGen, n.mu.cacheVerOK = versionOf(a), n.mu.gen, true
}

// cachedChunkLocked returns chunk idx from the chunk cache, if this open
// state may use it and the chunk is there.
func (n *openInode) cachedChunkLocked(idx uint64) ([]byte, bool) {
	v, ok := n.cacheVersionLocked()
	if !ok {
		return nil, false
	}
	return n.c.chunks.get(chunkKey{n.ino, idx}, v)
}

// keepChunkLocked puts a whole chunk fetched under version v, at change
// count gen, into the chunk cache, unless the open state has moved on since
// the fetch began (a write of this client's, a refresh to a newer
// version): the bytes may then be neither the old content nor the new.
func (n *openInode) keepChunkLocked(idx uint64, v cacheVersion, gen uint64, data []byte) {
	now, ok := n.cacheVersionLocked()
	if !ok || now != v || n.mu.gen != gen {
		return
	}
	n.c.chunks.put(chunkKey{n.ino, idx}, v, data)
}
