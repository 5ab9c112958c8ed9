package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// pingMethod is the method the round-trip measurement calls; its handler echoes
// a GetXattrReply.
const pingMethod = weftpb.MethodGetXattr

// MeasureRoundTrip measures n round trips of an rpc call and n of a raw TCP
// ping-pong, interleaved so that both see the same machine load, over
// 127.0.0.1. The rpc call sends and receives a GetXattrReply whose value has
// payload bytes (so its encoding is 2-3 bytes longer); the raw ping-pong
// writes payload bytes and reads them back. It is what `weft bench` reports as
// the transport's overhead.
func MeasureRoundTrip(ctx context.Context, n int, payload int) (rpcLatencies, rawLatencies []time.Duration, err error) {
	if n <= 0 || payload <= 0 {
		return nil, nil, errs.New(errs.Invalid, "measure round trip", "need n > 0 and payload > 0, got %d and %d", n, payload)
	}
	conn, stopRPC, err := startPingServer(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stopRPC()
	raw, stopRaw, err := startRawEcho(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stopRaw()

	req := &weftpb.GetXattrReply{Value: make([]byte, payload)}
	resp := &weftpb.GetXattrReply{}
	buf := make([]byte, payload)
	// Warm up both paths: first calls pay for buffer growth and scheduling.
	for range min(n, 100) {
		if err := conn.Call(ctx, pingMethod, req, resp); err != nil {
			return nil, nil, err
		}
		if err := rawPingPong(raw, buf); err != nil {
			return nil, nil, err
		}
	}
	rpcLatencies = make([]time.Duration, 0, n)
	rawLatencies = make([]time.Duration, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, nil, ctxError(ctx, "measure round trip")
		}
		start := time.Now()
		if err := conn.Call(ctx, pingMethod, req, resp); err != nil {
			return nil, nil, err
		}
		mid := time.Now()
		if err := rawPingPong(raw, buf); err != nil {
			return nil, nil, err
		}
		end := time.Now()
		rpcLatencies = append(rpcLatencies, mid.Sub(start))
		rawLatencies = append(rawLatencies, end.Sub(mid))
	}
	return rpcLatencies, rawLatencies, nil
}

// startPingServer serves the echo method on a loopback port and dials it.
func startPingServer(ctx context.Context) (*Conn, func(), error) {
	mux := NewMux()
	Handle(mux, pingMethod, func(_ context.Context, req *weftpb.GetXattrReply) (*weftpb.GetXattrReply, error) {
		return req, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, errs.Wrap(errs.Unavailable, "measure round trip", "listen", err)
	}
	srv := NewServer(mux, ServerOptions{})
	go srv.Serve(ln)
	conn, err := Dial(ctx, ln.Addr().String(), DialOptions{})
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return conn, func() { conn.Close(); srv.Close() }, nil
}

// startRawEcho runs a TCP echo server on a loopback port and connects to it.
func startRawEcho(ctx context.Context) (net.Conn, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, errs.Wrap(errs.Unavailable, "measure round trip", "listen", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveRawEcho(ln)
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		wg.Wait()
		return nil, nil, errs.Wrap(errs.Unavailable, "measure round trip", "dial", err)
	}
	return c, func() { c.Close(); ln.Close(); wg.Wait() }, nil
}

// serveRawEcho echoes everything on each accepted connection until the
// listener closes.
func serveRawEcho(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// rawPingPong writes buf and reads as many bytes back.
func rawPingPong(c net.Conn, buf []byte) error {
	if _, err := c.Write(buf); err != nil {
		return errs.Wrap(errs.Unavailable, "raw ping", "", err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return errs.Wrap(errs.Unavailable, "raw ping", "", err)
	}
	return nil
}
