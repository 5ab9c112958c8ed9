package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/proto/weftpb"
)

// The kill -9 test: a child process (this test binary, re-run) writes synced
// chunks and prints the sequence number of each acknowledged write; the
// parent kills it with SIGKILL mid-stream, reopens the directory and checks
// that every acknowledged write reads back exactly.

const crashDirEnv = "WEFT_STORE_CRASH_DIR"

// crashWrite is write seq of the child: block-aligned regions of their own,
// 64 to a chunk, so new chunk files are created along the way.
func crashWrite(seq int) (ChunkKey, int64, []byte) {
	data := bytes.Repeat([]byte{byte(seq), byte(seq >> 8)}, 500+seq*97%30000)
	return ChunkKey{Ino: 77, Index: uint64(seq / 64)}, int64(seq%64) * DefaultBlockSize, data
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs only as the child of TestKill9")
	}
	s, err := Open(Config{Backend: "disk", Dir: dir, Registry: prometheus.NewRegistry()})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for seq := 0; ; seq++ {
		k, off, data := crashWrite(seq)
		if _, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(k.Ino, k.Index), Offset: off, Data: data, Sync: true}); err != nil {
			fmt.Println("write:", err)
			os.Exit(1)
		}
		fmt.Println(seq) // acknowledged
	}
}

func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	acked := -1
	deadline := time.Now().Add(20 * time.Second)
	lines := bufio.NewScanner(out)
	for acked < 150 && time.Now().Before(deadline) && lines.Scan() {
		n, err := strconv.Atoi(lines.Text())
		if err != nil {
			t.Fatalf("child: %s", lines.Text())
		}
		acked = n
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL, mid-write
		t.Fatal(err)
	}
	cmd.Wait()
	if acked < 70 {
		t.Fatalf("child acknowledged only %d writes", acked+1)
	}

	s := openStore(t, Config{Backend: "disk", Dir: dir})
	for seq := 0; seq <= acked; seq++ {
		k, off, data := crashWrite(seq)
		got, err := read(s, k.Ino, k.Index, off, int64(len(data)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("acknowledged write %d of %d: read %d bytes, %v", seq, acked+1, len(got), err)
		}
	}
	// The write in flight may be lost or torn, but never reads as wrong data:
	// what it did write is either its bytes or zeros.
	k, off, data := crashWrite(acked + 1)
	if got, err := read(s, k.Ino, k.Index, off, int64(len(data))); err == nil {
		for i, c := range got {
			if c != 0 && c != data[i] {
				t.Fatalf("write in flight: byte %d = %d, neither zero nor the written %d", i, c, data[i])
			}
		}
	}
}
