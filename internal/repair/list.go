package repair

import (
	"context"

	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Store is a store server as repair reaches it (an *rpc.Peer).
type Store interface {
	Call(ctx context.Context, method uint16, req, resp proto.Message) error
	CallData(ctx context.Context, method uint16, req proto.Message, data []byte, resp proto.Message) ([]byte, error)
	// Send sends a one-way message (a stripe lock's release).
	Send(ctx context.Context, method uint16, req proto.Message) error
}

// listPage is how many chunks one ListChunks call asks for.
const listPage = 1000

// lister walks one store's chunks in (ino, index) order, a page at a time.
type lister struct {
	store Store
	ino   uint64 // list only this file's chunks; 0: all
	page  []*weftpb.ChunkInfo
	after *weftpb.ChunkID
	err   error // the listing failed: the store's holdings are unknown
	done  bool
}

// peek returns the store's next chunk, or nil when it has no more or its
// listing failed (then l.err says why).
func (l *lister) peek(ctx context.Context, call func(context.Context, func(context.Context) error) error) *weftpb.ChunkInfo {
	for len(l.page) == 0 {
		if l.done || l.err != nil {
			return nil
		}
		req := &weftpb.ListChunksRequest{After: l.after, Limit: listPage, Ino: l.ino}
		var reply weftpb.ListChunksReply
		l.err = call(ctx, func(ctx context.Context) error {
			return l.store.Call(ctx, weftpb.MethodListChunks, req, &reply)
		})
		if l.err != nil {
			return nil
		}
		l.page = reply.GetChunks()
		l.done = !reply.GetMore() || len(l.page) == 0
		if n := len(l.page); n > 0 {
			l.after = l.page[n-1].GetChunk()
		}
	}
	return l.page[0]
}

func (l *lister) pop() { l.page = l.page[1:] }

// less orders chunk ids as stores list them.
func less(a, b *weftpb.ChunkID) bool {
	if a.GetIno() != b.GetIno() {
		return a.GetIno() < b.GetIno()
	}
	return a.GetIndex() < b.GetIndex()
}

func same(a, b *weftpb.ChunkID) bool {
	return a.GetIno() == b.GetIno() && a.GetIndex() == b.GetIndex()
}
