package meta

import (
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Register installs a handler for every meta method on mux.
func (s *Server) Register(mux *rpc.Mux) {
	rpc.Handle(mux, weftpb.MethodLookup, s.Lookup)
	rpc.Handle(mux, weftpb.MethodGetAttr, s.GetAttr)
	rpc.Handle(mux, weftpb.MethodSetAttr, s.SetAttr)
	rpc.Handle(mux, weftpb.MethodCreate, s.Create)
	rpc.Handle(mux, weftpb.MethodMkdir, s.Mkdir)
	rpc.Handle(mux, weftpb.MethodSymlink, s.Symlink)
	rpc.Handle(mux, weftpb.MethodReadlink, s.Readlink)
	rpc.Handle(mux, weftpb.MethodUnlink, s.Unlink)
	rpc.Handle(mux, weftpb.MethodRmdir, s.Rmdir)
	rpc.Handle(mux, weftpb.MethodRename, s.Rename)
	rpc.Handle(mux, weftpb.MethodLink, s.Link)
	rpc.Handle(mux, weftpb.MethodReadDir, s.ReadDir)
	rpc.Handle(mux, weftpb.MethodOpen, s.Open)
	rpc.Handle(mux, weftpb.MethodCommit, s.Commit)
	rpc.Handle(mux, weftpb.MethodAccess, s.Access)
	rpc.Handle(mux, weftpb.MethodStatFS, s.StatFS)
	rpc.Handle(mux, weftpb.MethodGetXattr, s.GetXattr)
	rpc.Handle(mux, weftpb.MethodSetXattr, s.SetXattr)
	rpc.Handle(mux, weftpb.MethodListXattr, s.ListXattr)
	rpc.Handle(mux, weftpb.MethodRemoveXattr, s.RemoveXattr)
	rpc.Handle(mux, weftpb.MethodStatus, s.Status)
	rpc.Handle(mux, weftpb.MethodScan, s.Scan)
	rpc.Handle(mux, weftpb.MethodReleaseReclaim, s.ReleaseReclaim)
	rpc.Handle(mux, weftpb.MethodGetCapability, s.GetCapability)
	rpc.Handle(mux, weftpb.MethodSyncMeta, s.SyncMeta)
	rpc.Handle(mux, weftpb.MethodFind, s.Find)
	rpc.Handle(mux, weftpb.MethodLocate, s.Locate)
	rpc.Handle(mux, weftpb.MethodAllocInos, s.AllocInos)
	rpc.Handle(mux, weftpb.MethodApplyBatch, s.ApplyBatch)
	rpc.Handle(mux, weftpb.MethodPeerLock, s.PeerLock)
	rpc.Handle(mux, weftpb.MethodPeerUnlock, s.PeerUnlock)
	rpc.Handle(mux, weftpb.MethodPeerGet, s.PeerGet)
	rpc.Handle(mux, weftpb.MethodPeerApply, s.PeerApply)
	rpc.Handle(mux, weftpb.MethodPeerInstallPartition, s.PeerInstallPartition)
	rpc.Handle(mux, weftpb.MethodPeerSetPerm, s.PeerSetPerm)
	rpc.Handle(mux, weftpb.MethodPeerRelease, s.PeerRelease)
	// Sessions, leases and file locks live in memory (internal/lease).
	s.leases.Register(mux)
}
