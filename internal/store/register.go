package store

import (
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Register serves the store methods (100-113) of s on mux.
func (s *Server) Register(mux *rpc.Mux) {
	// Chunk bytes travel as frame attachments, never inside the protos.
	rpc.HandleData(mux, weftpb.MethodWriteChunk, s.WriteChunkData)
	rpc.HandleData(mux, weftpb.MethodReadChunk, s.ReadChunkData)
	rpc.Handle(mux, weftpb.MethodTruncateChunk, s.TruncateChunk)
	rpc.Handle(mux, weftpb.MethodDeleteChunks, s.DeleteChunks)
	rpc.Handle(mux, weftpb.MethodSyncChunks, s.SyncChunks)
	rpc.Handle(mux, weftpb.MethodSyncStore, s.SyncStore)
	rpc.Handle(mux, weftpb.MethodStoreStatFS, s.StatFS)
	rpc.Handle(mux, weftpb.MethodListChunks, s.ListChunks)
	rpc.Handle(mux, weftpb.MethodMarkStoreComplete, s.MarkStoreComplete)
	rpc.Handle(mux, weftpb.MethodRevokeCapabilities, s.RevokeCapabilities)
	rpc.HandleData(mux, weftpb.MethodUndoWrite, s.UndoWrite)
	rpc.HandleOneWay(mux, weftpb.MethodReleaseUndo, s.ReleaseUndo)
	rpc.Handle(mux, weftpb.MethodLockStripe, s.LockStripe)
	rpc.HandleOneWay(mux, weftpb.MethodUnlockStripe, s.UnlockStripe)
}
