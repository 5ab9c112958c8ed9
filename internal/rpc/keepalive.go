package rpc

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Keepalives. A peer stopped with SIGSTOP, or behind a dead link, leaves
// its TCP connection open: writes to it fill the socket buffers and then
// block, and reads wait for ever. So each side of a connection whose peer
// said in the handshake that it sends pings (featurePing) watches the
// bytes coming in, and declares the connection dead when nothing at all
// has come for PeerTimeout. Every call in flight then fails with
// errs.Unavailable, and a blocked write returns, so the caller can fail
// over.
//
// For that to say nothing about a peer that is merely busy, each side
// makes sure the other hears from it: when it has written nothing for a
// ping interval (a fifth of PeerTimeout) it writes a ping frame. A handler
// that runs for minutes, or a large frame arriving slowly, keeps the
// connection alive, since the peer's own direction stays free for pings.
// A ping needs no answer: the peer pings on its own schedule.

// DefaultPeerTimeout is the default PeerTimeout of DialOptions and
// ServerOptions: long enough for a loaded machine's pauses, short enough
// that a stopped server is noticed in seconds.
const DefaultPeerTimeout = 5 * time.Second

// pingsPerTimeout is how many pings a quiet side sends within PeerTimeout.
const pingsPerTimeout = 5

// featurePing in the reserved field of the handshake says that this side
// sends pings. A peer without it (an older weft) is never declared dead.
const featurePing = 1 << 0

// keepalive is a connection's liveness state.
type keepalive struct {
	reads   atomic.Uint64 // reads from the socket that returned bytes
	writes  atomic.Uint64 // frames written, pings not counted
	pings   atomic.Uint64 // pings received
	pinging atomic.Bool   // a ping is being written

	// mu orders the timer's runs with startKeepalive and stop (the
	// runtime's timer gives the race detector no order to see).
	mu struct {
		sync.Mutex
		timeout               time.Duration // 0: off
		timer                 *time.Timer
		lastReads, lastWrites uint64
		heard                 time.Time // when reads last moved
	}
}

// countingReader counts the reads that return bytes, for the keepalive.
type countingReader struct {
	nc net.Conn
	n  *atomic.Uint64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.nc.Read(p)
	if n > 0 {
		r.n.Add(1)
	}
	return n, err
}

// startKeepalive arms the keepalive if the peer pings (peerFeatures from
// its handshake) and the timeout is not off.
func (c *Conn) startKeepalive(timeout time.Duration, peerFeatures uint16) {
	if timeout <= 0 || peerFeatures&featurePing == 0 {
		return
	}
	ka := &c.ka
	ka.mu.Lock()
	defer ka.mu.Unlock()
	ka.mu.timeout = timeout
	ka.mu.heard = time.Now()
	ka.mu.timer = time.AfterFunc(timeout/pingsPerTimeout, c.heartbeat)
}

// stop disarms the keepalive of a closed connection. A heartbeat already
// running finds the connection closed and does not re-arm.
func (ka *keepalive) stop() {
	ka.mu.Lock()
	defer ka.mu.Unlock()
	if ka.mu.timer != nil {
		ka.mu.timer.Stop()
	}
}

// heartbeat runs every ping interval: it closes a connection that has
// heard nothing for the timeout, and pings one that has said nothing for
// an interval.
func (c *Conn) heartbeat() {
	if c.isClosed() {
		return
	}
	ka := &c.ka
	now := time.Now()
	ka.mu.Lock()
	if r := ka.reads.Load(); r != ka.mu.lastReads {
		ka.mu.lastReads, ka.mu.heard = r, now
	}
	silent := now.Sub(ka.mu.heard)
	w := ka.writes.Load()
	idle := w == ka.mu.lastWrites
	ka.mu.lastWrites = w
	timeout := ka.mu.timeout
	ka.mu.Unlock()

	if silent >= timeout {
		c.closeWithError(errs.New(errs.Unavailable, "rpc",
			"nothing heard from %s for %v: the peer is stopped or unreachable", c.nc.RemoteAddr(), silent.Round(time.Millisecond)))
		return
	}
	// The ping is written by a goroutine of its own: a write to a peer
	// that stopped reading blocks, and this timer must still fire.
	if idle && ka.pinging.CompareAndSwap(false, true) {
		go func() {
			_ = c.writeFrame(context.Background(), &header{typ: framePing}, nil, nil)
			ka.pinging.Store(false)
		}()
	}
	ka.mu.Lock()
	ka.mu.timer.Reset(timeout / pingsPerTimeout)
	ka.mu.Unlock()
}

// pingsReceived is how many pings the peer has sent (tests).
func (c *Conn) pingsReceived() uint64 { return c.ka.pings.Load() }
