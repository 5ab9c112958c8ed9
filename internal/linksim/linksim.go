// Package linksim simulates a network link on loopback: a TCP proxy on
// 127.0.0.1 that forwards every connection to one target address and applies
// a one-way delay and a bandwidth cap to each direction. It stands in for tc
// netem, which this kernel does not have, in benchmarks (weft bench micro and
// seqread over "gige" and "dsl") and in tests that need a slow or distant
// peer.
//
// The model is a store-and-forward link per direction: bytes read from the
// sender are serialised at the direction's rate (a chunk leaves when the
// previous one has left and its own bytes have been clocked out), then
// arrive one delay later. Chunks are small enough (about 10 ms of traffic at
// the capped rate) that a slow link still streams. The queue between the
// two sides is bounded, so a sender that outruns the cap is slowed by TCP
// backpressure, as on a real link, instead of filling memory.
//
// Delays below a millisecond are waited for partly by yielding in a loop,
// because a sleeping goroutine on a busy machine wakes late by tens of
// microseconds; the proxy's own two loopback hops add a few tens of
// microseconds on top of the configured delay. Measure the round trip
// (RoundTrip) rather than trusting the profile's numbers.
package linksim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Profile describes a link. Up is the direction from the client (the side
// that connects to the proxy) to the target; Down is the way back.
type Profile struct {
	Name string
	// Delay is the one-way propagation delay, applied in each direction:
	// the round trip of a small message is about 2×Delay.
	Delay time.Duration
	// Up and Down cap each direction in bytes per second; 0 is unlimited.
	Up, Down int64
}

// The named profiles.
var (
	// GigE is a switched gigabit LAN: about 0.1 ms round trip, 1 Gbit/s.
	GigE = Profile{Name: "gige", Delay: 50 * time.Microsecond, Up: 125_000_000, Down: 125_000_000}
	// DSL is a home line to a distant server: about 30 ms round trip,
	// 1 Mbit/s up and 8 Mbit/s down.
	DSL = Profile{Name: "dsl", Delay: 15 * time.Millisecond, Up: 125_000, Down: 1_000_000}
)

// Profiles returns the named profiles.
func Profiles() []Profile { return []Profile{GigE, DSL} }

// ProfileByName returns the named profile.
func ProfileByName(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return Profile{}, errs.New(errs.Invalid, "link profile", "unknown profile %q (known: %s)", name, strings.Join(names, ", "))
}

// String describes the profile for reports.
func (p Profile) String() string {
	return fmt.Sprintf("%s (one-way delay %v, up %s, down %s)", p.Name, p.Delay, rate(p.Up), rate(p.Down))
}

func rate(bps int64) string {
	switch {
	case bps <= 0:
		return "unlimited"
	case bps*8 >= 1e9:
		return fmt.Sprintf("%g Gbit/s", float64(bps*8)/1e9)
	default:
		return fmt.Sprintf("%g Mbit/s", float64(bps*8)/1e6)
	}
}

// Validate rejects negative settings.
func (p Profile) Validate() error {
	if p.Delay < 0 || p.Up < 0 || p.Down < 0 {
		return errs.New(errs.Invalid, "link profile", "%s: delay and rates must not be negative", p.Name)
	}
	return nil
}

// Link is a running proxy.
type Link struct {
	profile Profile
	target  string
	ln      net.Listener
	log     *slog.Logger

	wg sync.WaitGroup // the accept loop and every connection's goroutines
	mu struct {
		sync.Mutex
		closed bool
		conns  map[net.Conn]struct{}
	}
}

// Listen starts a proxy on 127.0.0.1 (a free port) that forwards every
// connection to target through a link shaped like p. Close stops it.
func Listen(target string, p Profile, log *slog.Logger) (*Link, error) {
	const op = "link listen"
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, op, target, err)
	}
	l := &Link{profile: p, target: target, ln: ln, log: log.With("component", "linksim", "profile", p.Name)}
	l.mu.conns = map[net.Conn]struct{}{}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the proxy's address; clients connect here instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Profile is the link's shape.
func (l *Link) Profile() Profile { return l.profile }

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	err := l.ln.Close()
	for c := range l.mu.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// track registers c so Close can cut it; it reports false once the link is
// closed.
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return false
	}
	l.mu.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.mu.conns, c)
	l.mu.Unlock()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Warn("accept failed", "err", err)
			}
			return
		}
		if !l.track(c) {
			c.Close()
			return
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

// serve connects c to the target and runs both directions until both end.
func (l *Link) serve(c net.Conn) {
	defer l.wg.Done()
	defer l.untrack(c)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var d net.Dialer
	t, err := d.DialContext(ctx, "tcp", l.target)
	cancel()
	if err != nil {
		l.log.Warn("cannot reach target", "target", l.target, "err", err)
		return
	}
	if !l.track(t) {
		t.Close()
		return
	}
	defer l.untrack(t)
	defer t.Close()
	noDelay(c)
	noDelay(t)
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); pipe(t, c, l.profile.Delay, l.profile.Up) }()
	go func() { defer both.Done(); pipe(c, t, l.profile.Delay, l.profile.Down) }()
	both.Wait()
}

// noDelay turns Nagle off: the link, not the kernel, decides when bytes go.
func noDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
}

// chunk is bytes in flight with the time they arrive.
type chunk struct {
	data []byte
	at   time.Time
}

// queueDepth bounds the chunks in flight per direction (the link's buffer).
const queueDepth = 64

// pipe copies src to dst through one direction of the link. When src ends,
// dst's write side is closed once everything in flight has arrived; when dst
// fails, src is closed so the sender notices.
func pipe(dst, src net.Conn, delay time.Duration, bps int64) {
	q := make(chan chunk, queueDepth)
	done := make(chan struct{})
	go func() {
		defer close(done)
		deliver(dst, q)
		// Unblock the reader if delivery stopped early.
		src.Close()
		for range q {
		}
	}()
	size := chunkSize(bps)
	var departed time.Time // when the previous chunk finished leaving
	for {
		buf := make([]byte, size)
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			start := now
			if departed.After(start) {
				start = departed
			}
			departed = start.Add(transmit(n, bps))
			q <- chunk{data: buf[:n], at: departed.Add(delay)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// deliver writes each chunk when it arrives, then half-closes dst.
func deliver(dst net.Conn, q <-chan chunk) {
	for c := range q {
		waitUntil(c.at)
		if _, err := dst.Write(c.data); err != nil {
			dst.Close()
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	} else {
		dst.Close()
	}
}

// chunkSize is about 10 ms of traffic at rate bps, between one Ethernet frame
// and 64 KiB, so a slow link releases bytes steadily rather than in bursts.
func chunkSize(bps int64) int {
	const lo, hi = 1460, 64 << 10
	if bps <= 0 {
		return hi
	}
	return int(min(max(bps/100, lo), hi))
}

// transmit is how long n bytes take to leave at bps bytes per second.
func transmit(n int, bps int64) time.Duration {
	if bps <= 0 {
		return 0
	}
	return time.Duration(float64(n) / float64(bps) * float64(time.Second))
}

// spinBelow is the remaining wait under which waitUntil yields in a loop
// instead of sleeping: a timer wake-up is often this late.
const spinBelow = 200 * time.Microsecond

// waitUntil returns at or shortly after t.
func waitUntil(t time.Time) {
	for {
		left := time.Until(t)
		switch {
		case left <= 0:
			return
		case left > spinBelow:
			time.Sleep(left - spinBelow)
		default:
			runtime.Gosched()
		}
	}
}

// RoundTrip measures the median of n round trips of a 64-byte ping through
// a link shaped like p to a throwaway echo server: what a request on this
// profile costs before any server work.
func RoundTrip(p Profile, n int) (time.Duration, error) {
	const op = "link round trip"
	if n <= 0 {
		return 0, errs.New(errs.Invalid, op, "need n > 0, got %d", n)
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, errs.Wrap(errs.Unavailable, op, "echo", err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	l, err := Listen(echo.Addr().String(), p, nil)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	c, err := net.DialTimeout("tcp", l.Addr(), 10*time.Second)
	if err != nil {
		return 0, errs.Wrap(errs.Unavailable, op, l.Addr(), err)
	}
	defer c.Close()
	noDelay(c)
	c.SetDeadline(time.Now().Add(time.Duration(n)*(2*p.Delay+time.Second) + 10*time.Second))
	buf := make([]byte, 64)
	times := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := c.Write(buf); err != nil {
			return 0, errs.Wrap(errs.Unavailable, op, l.Addr(), err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, errs.Wrap(errs.Unavailable, op, l.Addr(), err)
		}
		times = append(times, time.Since(t))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times[len(times)/2], nil
}
