package store

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// The same-host path (docs/wire.md "Same-host path"). A client on the store
// server's machine sends a LocalIORequest on a unix socket together with the
// file it copies from or to (SCM_RIGHTS), and the store moves the bytes
// between that file and the chunk itself: the bytes never cross a socket,
// which on loopback TCP costs a copy on each side, the TCP work and the
// wake-ups (about half the CPU of weft put and weft get). The store gains
// no access it did not have: it reads or writes only the file the client
// handed over, and the chunk goes through the same validation, locks, CRCs
// and metrics as a WriteChunk or ReadChunk on the wire.

// localTimeout bounds one same-host request, as the client's upload timeout
// bounds a WriteChunk.
const localTimeout = 2 * time.Minute

// ServeSameHost serves the same-host path of s on the abstract unix socket
// name (rpc.SameHostName of the store's TCP address) until the returned
// server is closed.
func (s *Server) ServeSameHost(name string) (*rpc.SameHostServer, error) {
	refuse := func(err error) proto.Message { return localError(err) }
	return rpc.ServeSameHost(name, s.handleLocal, refuse, s.log)
}

func localError(err error) *weftpb.LocalIOReply {
	return &weftpb.LocalIOReply{ErrorKind: uint32(errs.KindOf(err)), Error: err.Error()}
}

// handleLocal runs one same-host request on file descriptor fd, which stays
// the caller's to close.
func (s *Server) handleLocal(msg []byte, fd int, peer rpc.PeerCred) proto.Message {
	var req weftpb.LocalIORequest
	if err := proto.Unmarshal(msg, &req); err != nil {
		return localError(errs.Wrap(errs.Protocol, "same-host request", "decode", err))
	}
	s.m.sameHost.Inc()
	if err := s.checkSameHostCap(&req, peer); err != nil {
		return localError(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), localTimeout)
	defer cancel()
	if req.GetWrite() {
		n, err := s.writeFromFile(ctx, &req, fd)
		if err != nil {
			return localError(err)
		}
		return &weftpb.LocalIOReply{Length: n}
	}
	reply, err := s.readToFile(ctx, &req, fd)
	if err != nil {
		return localError(err)
	}
	return reply
}

// writeFromFile writes the client file's bytes [FileOffset, +Length) into
// the chunk: read into a buffer of the store's own first, so that the CRCs
// and the chunk's bytes come from one copy that the client cannot change
// in between, and so that no chunk lock is held while the client's file is
// read.
func (s *Server) writeFromFile(ctx context.Context, req *weftpb.LocalIORequest, fd int) (int64, error) {
	const op = "write chunk"
	n, foff := req.GetLength(), req.GetFileOffset()
	if n < 0 || n > s.cfg.MaxChunkSize || foff < 0 {
		return 0, errs.New(errs.Invalid, op, "%d bytes at file offset %d", n, foff)
	}
	if err := rpc.CheckSameHostFile(op, fd, true); err != nil {
		return 0, err
	}
	buf := rpc.GetBuffer(int(n))
	defer rpc.PutBuffer(buf)
	if err := preadFull(fd, buf[:n], foff); err != nil {
		return 0, err
	}
	wreq := &weftpb.WriteChunkRequest{Chunk: req.GetChunk(), Offset: req.GetOffset(), Sync: req.GetSync(), WriteBehind: req.GetWriteBehind(), Capability: req.GetCapability()}
	if _, err := s.writeChunk(ctx, wreq, buf[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

// readToFile writes the chunk's bytes [Offset, +Length) into the client file
// at FileOffset, after the chunk lock is released, and replies how many
// there were and what ReadChunk says of the chunk.
func (s *Server) readToFile(ctx context.Context, req *weftpb.LocalIORequest, fd int) (*weftpb.LocalIOReply, error) {
	const op = "read chunk"
	if req.GetFileOffset() < 0 {
		return nil, errs.New(errs.Invalid, op, "file offset %d", req.GetFileOffset())
	}
	if err := rpc.CheckSameHostFile(op, fd, false); err != nil {
		return nil, err
	}
	var buf []byte
	defer func() { rpc.PutBuffer(buf) }()
	rreq := &weftpb.ReadChunkRequest{Chunk: req.GetChunk(), Offset: req.GetOffset(), Length: req.GetLength(), Capability: req.GetCapability()}
	data, rr, err := s.readChunk(ctx, rreq, func(n int) []byte {
		buf = rpc.GetBuffer(n)
		return buf
	})
	if err != nil {
		return nil, err
	}
	if err := pwriteFull(fd, data, req.GetFileOffset()); err != nil {
		return nil, err
	}
	return &weftpb.LocalIOReply{Length: int64(len(data)), Found: rr.Found, ChunkSize: rr.ChunkSize, Version: rr.Version}, nil
}

// preadFull reads len(p) bytes at off; a file that ends before is an error
// (the client said how long it was).
func preadFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		k, err := unix.Pread(fd, p, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return errs.Wrap(errs.IO, "read client file", "", err)
		}
		if k == 0 {
			return errs.New(errs.Invalid, "read client file", "the file ends at %d, before the bytes the request names", off)
		}
		p, off = p[k:], off+int64(k)
	}
	return nil
}

// pwriteFull writes p at off in pieces of writeUnit (see there).
func pwriteFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		k, err := unix.Pwrite(fd, p[:min(len(p), writeUnit)], off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		switch {
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return errs.Wrap(errs.NoSpace, "write client file", "", err)
		case errors.Is(err, unix.EFBIG):
			return errs.Wrap(errs.TooBig, "write client file", "", err)
		case err != nil:
			return errs.Wrap(errs.IO, "write client file", "", err)
		}
		p, off = p[k:], off+int64(k)
	}
	return nil
}
