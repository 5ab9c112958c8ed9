package edge

import (
	"context"

	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// forwarded are the client methods the edge passes upstream as they are.
// Lookup, getattr and readdir go through the cache; the lease methods are the
// edge's own (grant.go); server-to-server methods are not served.
var forwarded = []uint16{
	weftpb.MethodSetAttr, weftpb.MethodCreate, weftpb.MethodMkdir, weftpb.MethodSymlink,
	weftpb.MethodReadlink, weftpb.MethodUnlink, weftpb.MethodRmdir, weftpb.MethodRename,
	weftpb.MethodLink, weftpb.MethodOpen, weftpb.MethodCommit,
	weftpb.MethodAccess, weftpb.MethodStatFS, weftpb.MethodGetXattr, weftpb.MethodSetXattr,
	weftpb.MethodListXattr, weftpb.MethodRemoveXattr, weftpb.MethodStatus, weftpb.MethodScan,
	weftpb.MethodReleaseReclaim, weftpb.MethodGetCapability, weftpb.MethodFind, weftpb.MethodSyncMeta, weftpb.MethodLocate,
	weftpb.MethodSetLock, weftpb.MethodGetLock, weftpb.MethodLockKeepAlive,
	weftpb.MethodAllocInos, weftpb.MethodApplyBatch, // a write-back client's, under a delegated lease
}

// mux returns the handlers of the listener for this upstream server.
func (u *upstream) mux() *rpc.Mux {
	mux := rpc.NewMux()
	for _, m := range forwarded {
		rpc.HandleRaw(mux, m, func(ctx context.Context, msg, data []byte) ([]byte, rpc.Attachment, error) {
			msg, err := bindRequest(ctx, m, msg)
			if err != nil {
				return nil, rpc.Attachment{}, err
			}
			switch m {
			case weftpb.MethodSetAttr:
				resp, err := u.setAttr(ctx, msg, data)
				return resp, rpc.Attachment{}, err
			case weftpb.MethodSyncMeta:
				resp, err := u.syncMeta(ctx, msg, data)
				return resp, rpc.Attachment{}, err
			}
			return u.forward(ctx, m, msg, data)
		})
	}
	for _, m := range []uint16{weftpb.MethodLookup, weftpb.MethodGetAttr, weftpb.MethodReadDir} {
		rpc.HandleRaw(mux, m, func(ctx context.Context, msg, _ []byte) ([]byte, rpc.Attachment, error) {
			// Bound first: the cache is keyed by the request as the
			// upstream would see it.
			msg, err := bindRequest(ctx, m, msg)
			if err != nil {
				return nil, rpc.Attachment{}, err
			}
			resp, err := u.cachedRead(ctx, m, msg)
			return resp, rpc.Attachment{}, err
		})
	}
	rpc.Handle(mux, weftpb.MethodEndLockSession, u.endSession)
	rpc.Handle(mux, weftpb.MethodLeaseAcquire, u.grant)
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRelease, u.release)
	rpc.Handle(mux, weftpb.MethodLeaseStatus, u.grants.Status)
	return mux
}

// forward sends a request upstream with the caller's context (and so its
// deadline) and returns the reply as it came, or the upstream's error
// with its kind and message.
func (u *upstream) forward(ctx context.Context, method uint16, msg, data []byte) ([]byte, rpc.Attachment, error) {
	keys := writeKeys(method, msg)
	// The edge's own queued setattrs go first (writeback.go).
	wbDone, err := u.wbBeforeForward(ctx, method, msg, keys)
	if err != nil {
		return nil, rpc.Attachment{}, err
	}
	f := u.begin(ctx, keys)
	peer, done, err := u.route(ctx, method, keys)
	if err != nil {
		u.finish(f)
		wbDone()
		return nil, rpc.Attachment{}, err
	}
	var nd *newDirs
	if peer == u.deleg && method == weftpb.MethodApplyBatch {
		msg, nd = u.newDirsBefore(ctx, msg)
	}
	resp, respData, err := peer.CallRaw(ctx, method, msg, data)
	if nd != nil {
		resp = nd.after(u, resp, err)
	}
	done()
	u.finish(f)
	wbDone()
	if err != nil {
		return nil, rpc.Attachment{}, err
	}
	if peer == u.deleg {
		u.edge.metrics.delegated.Inc()
		if method == weftpb.MethodApplyBatch {
			u.edge.metrics.delegatedBatch.Inc()
		}
	}
	att := rpc.Attachment{}
	if respData != nil {
		att = rpc.Attachment{Data: respData, Release: func() { rpc.PutBuffer(respData) }}
	}
	return resp, att, nil
}

// endSession ends a client's session upstream (its locks) and here (its
// leases).
func (u *upstream) endSession(ctx context.Context, req *weftpb.EndLockSessionRequest) (*weftpb.Empty, error) {
	var reply weftpb.Empty
	if err := u.fwd.Call(ctx, weftpb.MethodEndLockSession, req, &reply); err != nil {
		return nil, err
	}
	return u.grants.EndSession(ctx, req)
}

// keysOf converts wire lease keys.
func keysOf(inos []uint64) []lease.Key {
	keys := make([]lease.Key, len(inos))
	for i, k := range inos {
		keys[i] = lease.Key(k)
	}
	return keys
}
