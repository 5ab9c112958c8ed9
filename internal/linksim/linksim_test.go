package linksim

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// Timing assertions are lower bounds only: a loaded machine makes the link
// slower, never faster, than its profile. Upper bounds are loose sanity
// limits.

// echoServer answers every connection by copying what it reads back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func listen(t *testing.T, target string, p Profile) *Link {
	t.Helper()
	l, err := Listen(target, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn)
}

func TestDelayAppliesInBothDirections(t *testing.T) {
	const delay = 20 * time.Millisecond
	l := listen(t, echoServer(t), Profile{Name: "test", Delay: delay})
	c := dial(t, l.Addr())
	buf := []byte("ping")
	for i := range 5 {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*delay {
			t.Fatalf("round trip %d took %v, want at least 2×%v", i, rtt, delay)
		} else if rtt > 2*time.Second {
			t.Fatalf("round trip %d took %v", i, rtt)
		}
	}
	if string(buf) != "ping" {
		t.Fatalf("echo returned %q", buf)
	}
}

func TestRoundTripOfProfiles(t *testing.T) {
	rtt, err := RoundTrip(DSL, 3)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 30*time.Millisecond {
		t.Errorf("dsl round trip %v, want at least 30ms", rtt)
	}
	rtt, err = RoundTrip(GigE, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gige round trip %v", rtt)
	if rtt < 100*time.Microsecond || rtt > time.Second {
		t.Errorf("gige round trip %v, want at least 100µs", rtt)
	}
}

// sink accepts one connection and counts what it reads until EOF.
func sink(t *testing.T) (string, <-chan int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	return ln.Addr().String(), got
}

func TestUpstreamCap(t *testing.T) {
	const rate, size = 1 << 20, 300 << 10 // 1 MiB/s, 300 KiB: at least 0.29 s
	addr, got := sink(t)
	l := listen(t, addr, Profile{Name: "test", Up: rate})
	c := dial(t, l.Addr())
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	select {
	case n := <-got:
		if n != size {
			t.Fatalf("target received %d bytes, want %d", n, size)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("target never saw the end of the stream")
	}
	want := time.Duration(float64(size) / rate * float64(time.Second))
	if el := time.Since(start); el < want*9/10 {
		t.Fatalf("%d bytes at %d B/s arrived in %v, want at least %v", size, rate, el, want)
	}
}

// source accepts one connection and writes size bytes to it.
func source(t *testing.T, data []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write(data)
		c.Close()
	}()
	return ln.Addr().String()
}

func TestDownstreamCapIsSeparateAndDataIntact(t *testing.T) {
	data := make([]byte, 256<<10)
	rand.Read(data)
	// The up direction is slow; downloads must be capped by Down alone.
	const down = 2 << 20
	l := listen(t, source(t, data), Profile{Name: "test", Up: 1000, Down: down})
	c := dial(t, l.Addr())
	start := time.Now()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes that differ from the %d sent", len(got), len(data))
	}
	want := time.Duration(float64(len(data)) / down * float64(time.Second))
	if el < want*9/10 {
		t.Fatalf("%d bytes at %d B/s arrived in %v, want at least %v", len(data), down, el, want)
	}
	if el > 10*want+5*time.Second {
		t.Fatalf("download took %v: capped by the up rate?", el)
	}
}

func TestCloseCutsConnections(t *testing.T) {
	l, err := Listen(echoServer(t), Profile{Name: "test", Delay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, l.Addr())
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still open after Close")
	}
	if _, err := net.DialTimeout("tcp", l.Addr(), time.Second); err == nil {
		t.Fatal("link still accepts after Close")
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range []string{"gige", "dsl"} {
		p, err := ProfileByName(name)
		if err != nil || p.Name != name {
			t.Fatalf("ProfileByName(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := ProfileByName("carrier-pigeon"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if DSL.Up*8 != 1_000_000 || DSL.Down*8 != 8_000_000 || 2*DSL.Delay != 30*time.Millisecond {
		t.Fatalf("dsl profile is %v", DSL)
	}
	if GigE.Up*8 != 1_000_000_000 || 2*GigE.Delay != 100*time.Microsecond {
		t.Fatalf("gige profile is %v", GigE)
	}
	if err := (Profile{Name: "bad", Delay: -1}).Validate(); err == nil {
		t.Fatal("negative delay accepted")
	}
}
