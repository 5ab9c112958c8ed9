package store

import (
	"context"
	"math"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Capabilities (internal/auth). With Config.Capabilities set, every chunk
// request carries a capability minted by a meta server (or, for repair and
// the admin tools, by a holder of the cluster secret), and the store checks
// its tag, expiry, inode, chunk range, rights and generation before it
// touches the backend. A refusal is errs.CapabilityRefused: the client
// fetches a fresh capability and tries again. Without a verifier (security
// mode none, or no secret configured) every request is admitted.
//
// Rights by request: ReadChunk and the same-host read need Read;
// WriteChunk, SyncChunks and the same-host write need Write; TruncateChunk
// and DeleteChunks need Write or Delete (a writer may cut the file anyway;
// the meta server's reclaimer holds Delete only).

// checkCap verifies tok for one of rights over chunks [first, last] of ino.
func (s *Server) checkCap(tok []byte, ino, first, last uint64, rights auth.Rights) (auth.Capability, error) {
	if s.cfg.Capabilities == nil {
		return auth.Capability{}, nil
	}
	c, err := s.cfg.Capabilities.Check(tok, ino, first, last, rights)
	if err != nil {
		s.m.capRefused.Inc()
		return auth.Capability{}, err
	}
	return c, nil
}

// checkChunkCap verifies tok for one chunk.
func (s *Server) checkChunkCap(tok []byte, k ChunkKey, rights auth.Rights) error {
	_, err := s.checkCap(tok, k.Ino, k.Index, k.Index, rights)
	return err
}

// checkSameHostCap verifies a same-host request's capability and that the
// process that sent it runs as root or as the capability's holder: the
// socket is open to every local user, and a capability is no bearer token
// there.
func (s *Server) checkSameHostCap(req *weftpb.LocalIORequest, peer rpc.PeerCred) error {
	if s.cfg.Capabilities == nil {
		return nil
	}
	k, err := chunkKey("same-host request", req.GetChunk())
	if err != nil {
		return err
	}
	rights := auth.Read
	if req.GetWrite() {
		rights = auth.Write
	}
	c, err := s.checkCap(req.GetCapability(), k.Ino, k.Index, k.Index, rights)
	if err != nil {
		return err
	}
	if peer.UID != 0 && peer.UID != c.HolderUID {
		s.m.capRefused.Inc()
		return auth.WrongHolder(peer.UID, c.HolderUID)
	}
	return nil
}

// RevokeCapabilities applies a meta server's revocations: capabilities of
// each inode below the given generation are refused from now on.
func (s *Server) RevokeCapabilities(ctx context.Context, req *weftpb.RevokeCapabilitiesRequest) (*weftpb.RevokeCapabilitiesReply, error) {
	const op = "revoke capabilities"
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	if len(req.GetRevocations()) > maxRevocationsPerCall {
		return nil, errs.New(errs.Invalid, op, "%d revocations in one call, at most %d", len(req.GetRevocations()), maxRevocationsPerCall)
	}
	if s.cfg.Capabilities == nil {
		return &weftpb.RevokeCapabilitiesReply{}, nil
	}
	for _, r := range req.GetRevocations() {
		s.cfg.Capabilities.Revoke(r.GetIno(), r.GetGeneration(), r.GetRevokedAtNs())
	}
	return &weftpb.RevokeCapabilitiesReply{}, nil
}

// maxRevocationsPerCall bounds one RevokeCapabilities request.
const maxRevocationsPerCall = 4096

// allChunks is the last chunk index a deletion of "every chunk from" names.
const allChunks = math.MaxUint64
