package edge

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	// maxReplies bounds the replies the edge caches per upstream server.
	maxReplies = 100_000
	// minCacheTrust: a read is cached only under upstream leases trusted
	// for at least this long, else it is only forwarded.
	minCacheTrust = 100 * time.Millisecond
)

// cachedReply is a getattr, lookup or readdir reply and the upstream leases that
// cover it: valid while each is still held (no recall) and trusted.
type cachedReply struct {
	resp   []byte
	keys   []lease.Key
	leases []*upLease
	// A split directory's attributes include its other partitions' mtimes,
	// which no lease here covers (a client's kernel cache has the same
	// gap, for at most a term): such a reply is read again in the
	// background once it is maxAge/2 old, and not served past maxAge.
	aged       bool
	stored     time.Time
	refreshing bool
	method     uint16
	msg        []byte
}

// maxAge bounds how long a split directory's attributes are served from
// the cache: one upstream lease term, as a client's kernel caches them.
const maxAge = lease.DefaultTerm

// cachedRead answers a getattr, lookup or readdir from the cache, or forwards it
// and caches the reply under the edge's upstream leases on the records
// the upstream server read for it. The cache key is the whole request,
// credentials included, so a reply never serves a caller the upstream
// would have answered otherwise.
func (u *upstream) cachedRead(ctx context.Context, method uint16, msg []byte) ([]byte, error) {
	key := string(rune(method)) + string(msg)
	if resp := u.hit(key); resp != nil {
		u.edge.metrics.cacheHits.Inc()
		return resp, nil
	}
	u.edge.metrics.cacheMisses.Inc()
	keys, ok := readKeys(method, msg)
	if !ok {
		resp, _, err := u.forward(ctx, method, msg, nil)
		return resp, err
	}
	hs, leased := u.ensure(ctx, keys, minCacheTrust, false)
	sent := time.Now()
	resp, _, err := u.forward(ctx, method, msg, nil)
	if err == nil {
		u.edge.dirs.noteDirs(method, resp)
	}
	if err != nil || !leased {
		return resp, err
	}
	// Attributes a reply carries are in the entries (covered by the
	// directory's key) unless the node is a directory or has several
	// links: then they are in the node's own record, under its key, which
	// is leased before the records are read again.
	more, ok := u.replyKeys(method, resp)
	if !ok {
		return resp, nil
	}
	if mhs, held := u.heldSince(more, sent, minCacheTrust); held {
		// Leased before the read went out: it covered them.
		keys, hs, more = append(keys, more...), append(hs, mhs...), nil
	}
	if len(more) > 0 {
		keys = append(keys, more...)
		if hs, leased = u.ensure(ctx, keys, minCacheTrust, false); !leased {
			return resp, nil
		}
		if resp, _, err = u.forward(ctx, method, msg, nil); err != nil {
			return resp, err
		}
		again, ok := u.replyKeys(method, resp)
		if !ok || !subset(again, keys) {
			return resp, nil // changed meanwhile: not cached
		}
	}
	u.store(key, method, msg, resp, keys, hs)
	return resp, nil
}

// dirAttrs reports whether a getattr or lookup reply is a directory's
// attributes.
func dirAttrs(method uint16, resp []byte) bool {
	var a *weftpb.Attr
	switch method {
	case weftpb.MethodGetAttr:
		var r weftpb.GetAttrReply
		if proto.Unmarshal(resp, &r) != nil {
			return true
		}
		a = r.Attr
	case weftpb.MethodLookup:
		var r weftpb.LookupReply
		if proto.Unmarshal(resp, &r) != nil {
			return true
		}
		a = r.Attr
	}
	return a != nil && a.Mode&core.ModeType == core.ModeDir
}

// refresh reads a cached reply again under its leases and stores it anew.
func (u *upstream) refresh(key string, r *cachedReply) {
	ctx, cancel := context.WithTimeout(u.edge.life, acquireWait)
	defer cancel()
	hs, ok := u.ensure(ctx, r.keys, minCacheTrust, false)
	if ok {
		if resp, _, err := u.forward(ctx, r.method, r.msg, nil); err == nil {
			u.store(key, r.method, r.msg, resp, r.keys, hs)
			return
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.replies[key] == r {
		delete(u.mu.replies, key)
	}
}

// replyKeys returns the keys of the nodes whose own records a reply's
// attributes come from; ok is false when one of them is on another server
// (a readdir's listing reads them there), so the reply is not cached.
func (u *upstream) replyKeys(method uint16, resp []byte) (keys []lease.Key, ok bool) {
	own := func(a *weftpb.Attr) bool {
		if a == nil || a.Mode&core.ModeType != core.ModeDir && a.Nlink <= 1 {
			return true // in the entry
		}
		if core.Ino(a.Ino).Server()%u.servers != u.index {
			return false
		}
		keys = append(keys, lease.Key(a.Ino))
		return true
	}
	switch method {
	case weftpb.MethodLookup:
		var r weftpb.LookupReply
		if proto.Unmarshal(resp, &r) != nil {
			return nil, false
		}
		return keys, own(r.Attr)
	case weftpb.MethodReadDir:
		var r weftpb.ReadDirReply
		if proto.Unmarshal(resp, &r) != nil {
			return nil, false
		}
		for _, e := range r.Entries {
			if !own(e.Attr) {
				return nil, false
			}
		}
	}
	return keys, true
}

func subset(keys, of []lease.Key) bool {
	for _, k := range keys {
		if !slices.Contains(of, k) {
			return false
		}
	}
	return true
}

// readKeys returns the keys of the upstream leases that cover what a
// getattr, lookup or readdir request reads on its server (the records of that
// server only: a node whose record is elsewhere is answered with a
// redirect). ok is false for a request the edge does not cache.
func readKeys(method uint16, msg []byte) (keys []lease.Key, ok bool) {
	switch method {
	case weftpb.MethodGetAttr:
		var req weftpb.GetAttrRequest
		if proto.Unmarshal(msg, &req) != nil || req.Node == nil || req.Node.Ino == 0 {
			return nil, false
		}
		keys = append(keys, lease.Key(req.Node.Ino))
		if req.Node.Parent != 0 {
			keys = append(keys, lease.Key(req.Node.Parent))
		}
		return keys, true
	case weftpb.MethodLookup:
		var req weftpb.LookupRequest
		if proto.Unmarshal(msg, &req) != nil || req.Parent == 0 {
			return nil, false
		}
		return []lease.Key{lease.Key(req.Parent)}, true
	case weftpb.MethodReadDir:
		// This server's partition of the directory, and its record
		// here (bitmap, permissions).
		var req weftpb.ReadDirRequest
		if proto.Unmarshal(msg, &req) != nil || req.Dir == 0 {
			return nil, false
		}
		return []lease.Key{lease.Key(req.Dir)}, true
	}
	return nil, false
}

// hit returns the cached reply for key if its leases still cover it.
func (u *upstream) hit(key string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.mu.replies[key]
	if r == nil {
		return nil
	}
	now := time.Now()
	if !u.currentLocked(r.keys, r.leases, now) || r.aged && now.Sub(r.stored) >= maxAge {
		delete(u.mu.replies, key)
		return nil
	}
	u.renewSoonLocked(r.keys, now)
	if r.aged && !r.refreshing && now.Sub(r.stored) >= maxAge/2 {
		r.refreshing = true
		u.edge.spawn(func() { u.refresh(key, r) })
	}
	return r.resp
}

// store caches resp under leases hs on keys, unless a recall removed one
// of them since they were taken (the reply may predate the change).
func (u *upstream) store(key string, method uint16, msg, resp []byte, keys []lease.Key, hs []*upLease) {
	aged := u.servers > 1 && dirAttrs(method, resp)
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.currentLocked(keys, hs, time.Now()) {
		return
	}
	if len(u.mu.replies) >= maxReplies || len(u.mu.byKey) >= maxReplies {
		u.sweepLocked()
		if len(u.mu.replies) >= maxReplies {
			return
		}
	}
	r := &cachedReply{resp: resp, keys: keys, leases: hs, aged: aged, stored: time.Now(), method: method}
	if aged {
		r.msg = slices.Clone(msg) // for refresh; the caller's buffer is reused
	}
	u.mu.replies[key] = r
	for _, k := range keys {
		m := u.mu.byKey[k]
		if m == nil {
			m = make(map[string]struct{})
			u.mu.byKey[k] = m
		}
		m[key] = struct{}{}
	}
}

// dropRepliesLocked forgets the replies cached under k.
func (u *upstream) dropRepliesLocked(k lease.Key) {
	for key := range u.mu.byKey[k] {
		delete(u.mu.replies, key)
	}
	delete(u.mu.byKey, k)
}

// sweepLocked drops the replies whose leases ended and rebuilds the index.
func (u *upstream) sweepLocked() {
	now := time.Now()
	u.mu.byKey = make(map[lease.Key]map[string]struct{})
	for key, r := range u.mu.replies {
		if !u.currentLocked(r.keys, r.leases, now) {
			delete(u.mu.replies, key)
			continue
		}
		for _, k := range r.keys {
			m := u.mu.byKey[k]
			if m == nil {
				m = make(map[string]struct{})
				u.mu.byKey[k] = m
			}
			m[key] = struct{}{}
		}
	}
}
