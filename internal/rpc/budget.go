package rpc

import (
	"io"
	"sync"
	"sync/atomic"
)

// A peer chooses the length its frame header declares, and then may send
// nothing more. So that a header cannot make a server allocate up to the
// frame limit for free, a body is allocated in one piece only while the
// server's budget of such allocations (ServerOptions.MaxBodyInFlight) lasts;
// beyond it the buffer starts at growStep bytes and doubles as the bytes
// arrive, so it never holds more than about twice what was received. A
// dialed connection has no budget: it trusts the server its caller chose. Bodies up to growStep bytes are not counted: each connection
// reads one frame at a time, so they cost at most growStep per connection.
// FrameTimeout then closes a connection whose body stops coming.

// DefaultMaxBodyInFlight is a server's budget of frame bodies allocated in
// full before their bytes arrived: twelve 4 MiB chunks.
const DefaultMaxBodyInFlight = 48 << 20

// growStep is the first buffer of a body read as it arrives.
const growStep = 32 << 10

// bodyBudget is a server-wide count of body bytes allocated before they
// arrived. A nil budget allows everything (a dialed connection, whose peer
// the caller chose).
type bodyBudget struct {
	// reading counts bodies being read (tests wait for it).
	reading atomic.Int64
	mu      struct {
		sync.Mutex
		free int
	}
}

func newBodyBudget(n int) *bodyBudget {
	b := &bodyBudget{}
	b.mu.free = n
	return b
}

// take reserves n bytes if the budget has them. It never waits: a body that
// finds the budget spent is read as it arrives instead.
func (b *bodyBudget) take(n int) bool {
	if b == nil || n <= growStep {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.mu.free {
		return false
	}
	b.mu.free -= n
	return true
}

// give returns what take reserved, once the body has been read.
func (b *bodyBudget) give(n int) {
	if b == nil || n <= growStep {
		return
	}
	b.mu.Lock()
	b.mu.free += n
	b.mu.Unlock()
}

// readGrowing reads n bytes from r into buf (which may be nil), starting at
// growStep bytes and doubling as they arrive: a new buffer comes from get,
// and the old one, its bytes copied, goes to put. The copies add at most n
// bytes to the n read. On an error it returns what it read so far.
func readGrowing(r io.Reader, n int, buf []byte, get func(int) []byte, put func([]byte)) ([]byte, error) {
	got := 0
	for size := min(n, growStep); ; size = min(2*size, n) {
		if cap(buf) < size {
			nb := get(size)
			copy(nb, buf[:got])
			put(buf)
			buf = nb
		}
		buf = buf[:size]
		k, err := io.ReadFull(r, buf[got:])
		got += k
		if err != nil {
			return buf[:got], err
		}
		if got == n {
			return buf, nil
		}
	}
}
