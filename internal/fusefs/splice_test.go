package fusefs

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log destination the mount and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBigReadsLogNothing reads a file in requests of the largest size: the
// mount's log stays quiet (go-fuse used to log a failed splice attempt,
// "trySplice: ... max pipe size", for every such read).
func TestBigReadsLogNothing(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t)
	var logs lockedBuffer
	// go-fuse's server logged through the standard logger, not the
	// mount's: watch both.
	prev := log.Writer()
	log.SetOutput(&logs)
	t.Cleanup(func() { log.SetOutput(prev) })
	m := mount(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	data := bytes.Repeat([]byte("weft big read "), 8<<20/14)
	// Written by the client, not through the mount: the kernel has no
	// page of it cached, so every read reaches the mount.
	if _, err := c.WriteFrom(context.Background(), "/big", bytes.NewReader(data), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(m.Dir(), "big")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	var got []byte
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		got = append(got, buf[:n]...)
		off += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
	}
	if l := logs.String(); strings.Contains(l, "trySplice") {
		t.Errorf("big reads logged splice failures:\n%.2000s", l)
	}
}
