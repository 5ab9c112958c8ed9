package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
)

// TestRetryEndsWithTimeout: a call retried while its meta server refuses
// connections ends, when the caller's deadline passes, with a timeout
// (ETIMEDOUT), not a cancel (ECANCELED): nobody canceled it.
func TestRetryEndsWithTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	c, err := client.New(client.Config{MetaAddrs: []string{addr}, StoreAddrs: []string{addr}, RetryFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Stat(ctx, "/"); !errs.Is(err, errs.Timeout) {
		t.Fatalf("stat past its deadline against a refusing server: %v (kind %v), want Timeout", err, errs.KindOf(err))
	}
}
