package edge

import (
	"context"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Delegated write leases. A client's write lease on a key is granted from
// the edge's lease table on a write lease the edge holds upstream itself,
// under a session of its own (wsession) on a connection of its own
// (deleg). So a client that takes it again, renews it or gives it back
// talks only to the edge; and a write-back client (internal/client
// writeback*.go) completes its changes under it locally, as it would under
// a meta server's lease, and sends them (ApplyBatch) through the edge.
//
// The upstream spares the leases of the connection a change comes on. So
// the changes the edge forwards on deleg do not recall its write leases
// there, and the edge must do for them what a meta server does for its
// own leases: before such a change goes upstream, recall the other
// clients' leases on the delegated keys it names (lease.BeginChange on the
// edge's table, sparing the requester), and replace the upstream lease's
// record so that no reply cached under it, or read while the change ran,
// is served afterwards. That is only as exact as the keys the edge reads
// in a request (writeKeys): a change goes on deleg only if its method is
// one whose request names every key it writes on its server (delegable),
// and names a delegated key. Every other change goes on fwd, where the
// upstream recalls whatever of the edge's leases it touches, write leases
// included, which the edge passes on to its clients before it gives them
// back. A write lease being recalled still counts as delegated until the
// edge releases it upstream (wpending): the holder's flush of its queue,
// which the recall asked for, must be spared upstream, or the upstream
// would wait for the edge, which waits for the holder, which waits for
// its flush.
//
// Durability: without Config.WriteBack the edge holds no change of its
// own (with it, its queued setattrs: writeback.go). A write-back client's
// queue is in the client; what reaches the edge goes upstream before it
// is answered, so a kill -9 of the edge loses nothing its clients were
// told was done (fsync included), and a write lease the dead edge held
// upstream ends with its term there.

// delegable are the changes whose request names every delegated lease key
// on the receiving server that the change writes (writeKeys): the parent
// whose entries they change and the node whose record they change.
// Rmdir and rename may write a directory's record their requests do not
// name (the removed or replaced directory's, a moved directory's ".."),
// which may be delegated to another client (one with creates queued in
// it): they go on deleg only as onlyNamed says, else on fwd, where the
// upstream recalls it.
var delegable = map[uint16]bool{
	weftpb.MethodCreate: true, weftpb.MethodMkdir: true, weftpb.MethodSymlink: true,
	weftpb.MethodSetAttr: true, weftpb.MethodCommit: true, weftpb.MethodOpen: true,
	weftpb.MethodSetXattr: true, weftpb.MethodRemoveXattr: true, weftpb.MethodApplyBatch: true,
	weftpb.MethodUnlink: true, weftpb.MethodLink: true,
}

// fileRecords are the delegable changes that may also write a file's own
// record or xattrs their request does not name (an unlink of a
// hard-linked file, or of one with xattrs; a link's other names). A
// write-back client asks for write leases on directories only, and then
// they name every delegated key they write; but any client may ask for
// one on a file (weft bench micro does), so they go on deleg only while
// every write lease the edge holds here is on a directory it has seen
// (dirs.go) or on a key they name.
var fileRecords = map[uint16]bool{weftpb.MethodUnlink: true, weftpb.MethodLink: true}

// onlyNamed are the changes that may write a directory's own record their
// request does not name: an rmdir the removed directory's, a rename a
// replaced directory's or a moved directory's (its ".."), or a file's
// (a replaced hard-linked file's). That directory may be delegated to
// another client of the edge, with creates queued in it, and the upstream
// would spare it on deleg. So they go on deleg only while every write
// lease the edge holds on this server (held or being given back) is on a
// key they name: whatever else they write is then under no lease of
// deleg's, and the upstream recalls it as for any change (the edge's
// read leases are on its cache connection). A write-back client working
// in one directory renames over a name and removes a subdirectory there
// without losing its lease; holding several, it still loses them (fwd).
var onlyNamed = map[uint16]bool{weftpb.MethodRmdir: true, weftpb.MethodRename: true}

// route returns the connection a change naming keys goes upstream on, and
// what to call once its reply is in. A change under a delegated key first
// recalls the other clients' leases on it here, bounded by their term.
func (u *upstream) route(ctx context.Context, method uint16, keys []lease.Key) (*rpc.Peer, func(), error) {
	if !delegable[method] && !onlyNamed[method] || len(keys) == 0 {
		return u.fwd, func() {}, nil
	}
	u.mu.Lock()
	dk := u.delegatedLocked(keys)
	if fileRecords[method] && !u.onlyDirsDelegatedLocked(keys) || onlyNamed[method] && !u.onlyNamedDelegatedLocked(keys) {
		dk = nil
	}
	u.mu.Unlock()
	if len(dk) == 0 {
		return u.fwd, func() {}, nil
	}
	bctx, cancel := context.WithTimeout(ctx, u.term+recallSlack)
	end, err := u.grants.BeginChange(bctx, lease.HolderOf(ctx), dk)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.delegatedLocked(dk)) != len(dk) || fileRecords[method] && !u.onlyDirsDelegatedLocked(keys) ||
		onlyNamed[method] && !u.onlyNamedDelegatedLocked(keys) {
		// Recalled upstream and given back meanwhile: the upstream
		// recalls what the change touches, as for any change.
		end()
		return u.fwd, func() {}, nil
	}
	u.renewRecordsLocked(dk)
	return u.deleg, func() {
		u.mu.Lock()
		u.renewRecordsLocked(dk)
		u.mu.Unlock()
		end()
	}, nil
}

// delegatedLocked returns those of keys the edge is the writer of
// upstream: it holds a write lease there, or is giving one back.
func (u *upstream) delegatedLocked(keys []lease.Key) []lease.Key {
	var out []lease.Key
	for _, k := range keys {
		if h := u.mu.held[k]; h != nil && h.write || u.mu.wpending[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

// onlyDirsDelegatedLocked reports whether every key the edge is the writer
// of upstream (delegatedLocked) is a directory it has seen or one of
// named.
func (u *upstream) onlyDirsDelegatedLocked(named []lease.Key) bool {
	ok := func(k lease.Key) bool { return u.edge.dirs.has(core.Ino(k)) || slices.Contains(named, k) }
	for k, h := range u.mu.held {
		if h.write && !ok(k) {
			return false
		}
	}
	for k := range u.mu.wpending {
		if !ok(k) {
			return false
		}
	}
	return true
}

// onlyNamedDelegatedLocked reports whether every key the edge is the
// writer of upstream (delegatedLocked) is one of named.
func (u *upstream) onlyNamedDelegatedLocked(named []lease.Key) bool {
	for k, h := range u.mu.held {
		if h.write && !slices.Contains(named, k) {
			return false
		}
	}
	for k := range u.mu.wpending {
		if !slices.Contains(named, k) {
			return false
		}
	}
	return true
}

// renewRecordsLocked replaces the records of the edge's write leases on
// keys with copies: what was cached, or is being read, under the old ones
// is not served again (a change on deleg recalls nothing upstream to tell
// the edge).
func (u *upstream) renewRecordsLocked(keys []lease.Key) {
	for _, k := range keys {
		if h := u.mu.held[k]; h != nil {
			c := *h
			u.mu.held[k] = &c
			u.dropRepliesLocked(k)
		}
	}
}
