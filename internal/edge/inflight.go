package edge

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// A meta server spares the leases of the client whose change it commits
// (it knows what it changes; and a FUSE mount could not give a directory's
// lease back while its own create there holds the directory's lock in the
// kernel). Through the edge, the upstream sees the edge's session, not the
// client: so the edge notes which keys each forwarded change of a client
// names (writeKeys), and while the change is in flight an upstream recall
// of those keys spares that client's leases, as the meta server would.
// Once the change returns, the spared leases are recalled after all: the
// recall may have been for another client's change of the same keys.

// inflight is a client's change being forwarded.
type inflight struct {
	holder lease.Holder
	keys   []lease.Key
	spared []lease.Key // recalled while in flight, not from this client
}

// writeKeys returns the lease keys on the receiving server that a change
// request names: the directories whose entries it changes and the node
// whose record it changes. It may miss some (a renamed directory's own
// record, an inode elsewhere): those are recalled from the client as from
// anyone.
func writeKeys(method uint16, msg []byte) []lease.Key {
	var keys []lease.Key
	add := func(inos ...uint64) {
		for _, ino := range inos {
			if ino != 0 {
				keys = append(keys, lease.Key(ino))
			}
		}
	}
	// inParent adds the directory a request about a name changes.
	inParent := func(m interface {
		proto.Message
		GetParent() uint64
	}) {
		if proto.Unmarshal(msg, m) == nil {
			add(m.GetParent())
		}
	}
	// onNode adds the node a request changes, and its directory.
	onNode := func(m interface {
		proto.Message
		GetNode() *weftpb.NodeRef
	}) {
		if proto.Unmarshal(msg, m) == nil && m.GetNode() != nil {
			add(m.GetNode().Ino, m.GetNode().Parent)
		}
	}
	switch method {
	case weftpb.MethodCreate:
		inParent(&weftpb.CreateRequest{})
	case weftpb.MethodMkdir:
		inParent(&weftpb.MkdirRequest{})
	case weftpb.MethodSymlink:
		inParent(&weftpb.SymlinkRequest{})
	case weftpb.MethodUnlink:
		inParent(&weftpb.UnlinkRequest{})
	case weftpb.MethodRmdir:
		inParent(&weftpb.RmdirRequest{})
	case weftpb.MethodRename:
		var r weftpb.RenameRequest
		if proto.Unmarshal(msg, &r) == nil {
			add(r.SrcParent, r.DstParent)
		}
	case weftpb.MethodLink:
		r := &weftpb.LinkRequest{}
		onNode(r)
		add(r.NewParent) // 0, and so nothing, if it did not decode
	case weftpb.MethodSetAttr:
		onNode(&weftpb.SetAttrRequest{})
	case weftpb.MethodCommit:
		onNode(&weftpb.CommitRequest{})
	case weftpb.MethodOpen:
		onNode(&weftpb.OpenRequest{})
	case weftpb.MethodSetXattr:
		onNode(&weftpb.SetXattrRequest{})
	case weftpb.MethodRemoveXattr:
		onNode(&weftpb.RemoveXattrRequest{})
	case weftpb.MethodApplyBatch:
		// A batch changes entries of one directory's partition here,
		// and the attributes held in them, and of the directories its
		// renames (and the creates folded into them) move files into.
		var r weftpb.ApplyBatchRequest
		if proto.Unmarshal(msg, &r) == nil {
			add(r.Dir)
			for _, op := range r.Ops {
				add(op.GetRename().GetDstDir(), op.GetCreate().GetDir())
			}
		}
	}
	return keys
}

// begin notes a client's change in flight, naming keys (writeKeys); nil
// if there is nothing to note.
func (u *upstream) begin(ctx context.Context, keys []lease.Key) *inflight {
	holder := lease.HolderOf(ctx)
	if holder == nil {
		return nil
	}
	if len(keys) == 0 {
		return nil
	}
	f := &inflight{holder: holder, keys: keys}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, k := range keys {
		u.mu.inflight[k] = append(u.mu.inflight[k], f)
	}
	return f
}

// finish ends a change's note and recalls, in the background, the
// leases that were spared while it ran.
func (u *upstream) finish(f *inflight) {
	if f == nil {
		return
	}
	u.mu.Lock()
	for _, k := range f.keys {
		fs := u.mu.inflight[k]
		for i, g := range fs {
			if g == f {
				fs = append(fs[:i], fs[i+1:]...)
				break
			}
		}
		if len(fs) == 0 {
			delete(u.mu.inflight, k)
		} else {
			u.mu.inflight[k] = fs
		}
	}
	var groups map[lease.Holder][]lease.Key
	if len(f.spared) > 0 {
		// A client with another change naming the key in flight is
		// spared again, until that one returns.
		groups = u.spareLocked(f.spared)
	}
	u.mu.Unlock()
	if len(groups) > 0 {
		u.edge.spawn(func() { u.recallAllDownstream(groups) })
	}
}

// spareLocked splits recalled keys by the client to spare: the one client
// whose change in flight names the key (nil: recall everyone's).
func (u *upstream) spareLocked(keys []lease.Key) map[lease.Holder][]lease.Key {
	groups := map[lease.Holder][]lease.Key{}
	for _, k := range keys {
		var spare lease.Holder
		if fs := u.mu.inflight[k]; len(fs) == 1 {
			spare = fs[0].holder
			fs[0].spared = append(fs[0].spared, k)
		}
		groups[spare] = append(groups[spare], k)
	}
	return groups
}

// recallDownstream recalls the clients' leases on keys, except spare's,
// and waits (at most their term) until each is released or has ended.
func (u *upstream) recallDownstream(spare lease.Holder, keys []lease.Key) {
	ctx, cancel := context.WithTimeout(u.edge.life, u.term+recallSlack)
	defer cancel()
	end, err := u.grants.BeginChange(ctx, spare, keys)
	if err == nil {
		end()
	}
}

// recallAllDownstream runs recallDownstream for each group at once.
func (u *upstream) recallAllDownstream(groups map[lease.Holder][]lease.Key) {
	var wg sync.WaitGroup
	for spare, keys := range groups {
		wg.Go(func() { u.recallDownstream(spare, keys) })
	}
	wg.Wait()
}
