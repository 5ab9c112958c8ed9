package rpc

import (
	"context"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
)

// The same-host path (docs/wire.md "Same-host path"): beside its TCP
// listener, a server may serve a unix socket on which a client on the same
// machine sends one message and one file descriptor (SCM_RIGHTS) per
// request and gets one message back. The server then does the request's I/O
// on the client's file itself, so bulk data need not cross a socket.
// Connections carry one request at a time; a client keeps one per request in
// flight. The transport knows nothing of what the messages mean.

// SameHostName is the abstract unix socket name of the same-host path of
// the server listening on TCP address addr (an IP and a port, as
// net.Listener.Addr prints it). Abstract names belong to the network
// namespace as the TCP address does, so a client that reaches one reaches
// the server bound to the other.
func SameHostName(addr string) string { return "@weft/" + addr }

const (
	// sameHostVersion is the first byte of every same-host packet, before
	// the message: it versions the exchange and keeps a packet non-empty
	// when its message encodes to nothing (an empty packet reads as EOF).
	sameHostVersion = 1
	// maxSameHostMessage bounds a same-host packet either way.
	maxSameHostMessage = 4 << 10
	// maxSameHostFDs is how many descriptors a server takes from one
	// message; the kernel drops the rest, and the request is refused.
	maxSameHostFDs = 4
)

// SameHostHandler answers one same-host request: msg is the request message,
// fd the descriptor it carried, which the server closes after the handler
// returns, and peer the credentials of the process that connected. The
// reply must fit maxSameHostMessage once encoded.
type SameHostHandler func(msg []byte, fd int, peer PeerCred) proto.Message

// PeerCred is who connected to a same-host socket (SO_PEERCRED: the
// credentials of the process at connect time, which the kernel vouches for).
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// SameHostServer serves a same-host socket.
type SameHostServer struct {
	ln     *net.UnixListener
	handle SameHostHandler
	refuse func(err error) proto.Message
	log    *slog.Logger
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		conns  map[*net.UnixConn]struct{}
		closed bool
	}
}

// ServeSameHost listens on the abstract socket name and answers each request
// with handle, or, for a request the transport refuses (no descriptor, or
// several, or a message too long), with refuse(the reason).
func ServeSameHost(name string, handle SameHostHandler, refuse func(error) proto.Message, log *slog.Logger) (*SameHostServer, error) {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, "serve same-host path", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &SameHostServer{ln: ln, handle: handle, refuse: refuse, log: log}
	s.mu.conns = make(map[*net.UnixConn]struct{})
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Close stops accepting, closes every connection and waits for the requests
// in flight.
func (s *SameHostServer) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	err := s.ln.Close()
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *SameHostServer) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		s.mu.Lock()
		closed := s.mu.closed
		if err == nil && !closed {
			s.mu.conns[c] = struct{}{}
			s.wg.Add(1)
		}
		s.mu.Unlock()
		switch {
		case closed:
			if err == nil {
				c.Close()
			}
			return
		case err != nil:
			// Out of file descriptors and the like: wait, don't spin,
			// and don't give up (clients would quietly fall back to TCP).
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("same-host accept failed; retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go s.serve(c)
	}
}

// serve answers one connection's requests in turn.
func (s *SameHostServer) serve(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.mu.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	peer, err := peerCred(c)
	if err != nil {
		s.log.Warn("same-host peer credentials unreadable; connection closed", "err", err)
		return
	}
	buf := make([]byte, maxSameHostMessage)
	oob := make([]byte, unix.CmsgSpace(4*maxSameHostFDs))
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 && oobn == 0 {
			return // the client hung up
		}
		fds, ferr := receivedFDs(oob[:oobn])
		var reply proto.Message
		switch {
		case ferr != nil:
			reply = s.refuse(ferr)
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			reply = s.refuse(errs.New(errs.Protocol, "same-host request", "message or descriptors cut short (at most %d bytes and %d descriptors)", maxSameHostMessage, maxSameHostFDs))
		case n == 0 || buf[0] != sameHostVersion:
			reply = s.refuse(errs.New(errs.Protocol, "same-host request", "not a version %d packet", sameHostVersion))
		case len(fds) != 1:
			reply = s.refuse(errs.New(errs.Protocol, "same-host request", "want one file descriptor, got %d", len(fds)))
		default:
			reply = s.handleSafely(buf[1:n], fds[0], peer)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		out, err := proto.MarshalOptions{}.MarshalAppend([]byte{sameHostVersion}, reply)
		if err != nil || len(out) > maxSameHostMessage {
			s.log.Error("same-host reply not sent", "err", err, "len", len(out))
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// handleSafely runs the handler; a panic becomes an errs.IO reply, as on the
// wire, and the server goes on.
func (s *SameHostServer) handleSafely(msg []byte, fd int, peer PeerCred) (reply proto.Message) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("same-host handler panicked", "panic", r)
			reply = s.refuse(errs.New(errs.IO, "same-host request", "internal error"))
		}
	}()
	return s.handle(msg, fd, peer)
}

// receivedFDs returns the descriptors a message carried.
func receivedFDs(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, errs.Wrap(errs.Protocol, "same-host request", "control message", err)
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds, nil
}

// SameHostConn is a client's connection to a same-host socket: one request
// at a time.
type SameHostConn struct {
	// Timeout bounds a call whose context has no deadline (DialSameHost
	// sets DefaultCallTimeout; 0 or negative: no bound).
	Timeout time.Duration

	c   *net.UnixConn
	buf []byte // for replies
}

// DialSameHost connects to the same-host path of the server listening on TCP
// address addr. It fails if there is none on this machine, and refuses a
// socket served by a process of another user than this one or root: the
// client hands its files to whoever answers.
func DialSameHost(ctx context.Context, addr string) (*SameHostConn, error) {
	const op = "dial same-host path"
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return nil, errs.New(errs.Unavailable, op, "%s names no single host address", addr)
	}
	name := SameHostName(tcp.String())
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", name)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, op, name, err)
	}
	c := nc.(*net.UnixConn)
	if err := checkPeer(c); err != nil {
		c.Close()
		return nil, errs.WithPath(err, op, name)
	}
	return &SameHostConn{Timeout: DefaultCallTimeout, c: c, buf: make([]byte, maxSameHostMessage)}, nil
}

// checkPeer accepts a server running as this process's user or as root.
func checkPeer(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.UID != 0 && int(cred.UID) != os.Getuid() {
		return errs.New(errs.Permission, "check peer", "served by uid %d, not this user (%d) or root", cred.UID, os.Getuid())
	}
	return nil
}

// peerCred reads the credentials of the process at the other end of c.
func peerCred(c *net.UnixConn) (PeerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, errs.Wrap(errs.Unavailable, "check peer", "", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, errs.Wrap(errs.Unavailable, "check peer", "", err)
	}
	if cerr != nil {
		return PeerCred{}, errs.Wrap(errs.Unavailable, "check peer", "", cerr)
	}
	return PeerCred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// Call sends req with descriptor fd and decodes the reply into resp, within
// ctx's deadline, or Timeout if it has none. After an error the connection must be closed: a late reply
// could otherwise answer the next request.
func (s *SameHostConn) Call(ctx context.Context, req proto.Message, fd uintptr, resp proto.Message) error {
	const op = "same-host call"
	msg, err := proto.MarshalOptions{}.MarshalAppend([]byte{sameHostVersion}, req)
	if err != nil {
		return errs.Wrap(errs.Invalid, op, "encode", err)
	}
	if len(msg) > maxSameHostMessage {
		return errs.New(errs.Invalid, op, "message of %d bytes, over %d", len(msg), maxSameHostMessage)
	}
	ctx, cancel := withCallTimeout(ctx, s.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline() // zero: none
	if err := s.c.SetDeadline(deadline); err != nil {
		return errs.Wrap(errs.Unavailable, op, "", err)
	}
	stop := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, _, err := s.c.WriteMsgUnix(msg, unix.UnixRights(int(fd)), nil); err != nil {
		return sameHostErr(ctx, op, err)
	}
	n, err := s.c.Read(s.buf)
	if err != nil {
		return sameHostErr(ctx, op, err)
	}
	if n == 0 || s.buf[0] != sameHostVersion {
		return errs.New(errs.Protocol, op, "reply is not a version %d packet", sameHostVersion)
	}
	if err := proto.Unmarshal(s.buf[1:n], resp); err != nil {
		return errs.Wrap(errs.Protocol, op, "decode reply", err)
	}
	return nil
}

// sameHostErr is the error of a call whose socket failed: the context's, if
// it ended (the socket's deadline is the context's, and may fire first),
// else the connection's.
func sameHostErr(ctx context.Context, op string, err error) error {
	if ctxEnded(ctx) {
		return ctxError(ctx, op)
	}
	return errs.Wrap(errs.Unavailable, op, "", err)
}

// Close closes the connection.
func (s *SameHostConn) Close() error { return s.c.Close() }

// fuseMagic is FUSE's statfs f_type: a file on a FUSE mount (weft's own, for
// one) may be served by a process that waits for the server, so a server
// never reads or writes one for a client.
const fuseMagic = 0x65735546

// CheckSameHostFile refuses a descriptor a server must not do I/O on for a
// client: anything but a regular file, a file on FUSE, a file not open for
// what the server does with it (read: it is the source of the server's
// write; else the destination), and a destination open for appending
// (pwrite would append). Clients ask first, to keep such files on the wire.
func CheckSameHostFile(op string, fd int, read bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errs.Wrap(errs.Invalid, op, "client file", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errs.New(errs.Invalid, op, "client file is not a regular file")
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return errs.Wrap(errs.Invalid, op, "client file", err)
	}
	if fs.Type == fuseMagic {
		return errs.New(errs.Invalid, op, "client file is on a FUSE file system")
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return errs.Wrap(errs.Invalid, op, "client file", err)
	}
	acc := fl & unix.O_ACCMODE
	switch {
	case read && acc == unix.O_WRONLY:
		return errs.New(errs.BadHandle, op, "client file is not open for reading")
	case !read && acc == unix.O_RDONLY:
		return errs.New(errs.BadHandle, op, "client file is not open for writing")
	case !read && fl&unix.O_APPEND != 0:
		return errs.New(errs.Invalid, op, "client file is open for appending")
	}
	return nil
}
