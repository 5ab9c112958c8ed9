package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
)

// buildWeft compiles this binary once per test run.
func buildWeft(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weft")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freeAddr is a loopback address free a moment ago, with a port a server
// can stop and start again on (rpc.PickAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := rpc.PickAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// server is a weft meta or store process.
type server struct {
	cmd *exec.Cmd
	log *bytes.Buffer
}

func startServer(t *testing.T, bin, role, file, addr string) *server {
	t.Helper()
	s := &server{log: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, role, "--config", file, "--id", "0")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", role, err)
	}
	t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			s.kill()
			t.Fatalf("%s did not listen on %s: %v\n%s", role, addr, err, s.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and reaps the process; it is safe to call twice.
func (s *server) kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
}

// TestCrashKeepsAcknowledgedFiles writes files through the library to real
// weft meta and store processes in sync mode, kills both with SIGKILL while
// more writes are in flight, restarts them, and checks that every file whose
// close or fsync returned is intact.
func TestCrashKeepsAcknowledgedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	bin := buildWeft(t)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.ChunkSize = 64 << 10
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(freeAddr(t), filepath.Join(dir, "meta0"))}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(freeAddr(t), filepath.Join(dir, "store0"))}
	file := filepath.Join(dir, "weft.toml")
	if err := cfg.Write(file); err != nil {
		t.Fatal(err)
	}
	meta := startServer(t, bin, "meta", file, cfg.Meta[0].Addr)
	store := startServer(t, bin, "store", file, cfg.Store[0].Addr)

	c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	acked := map[string][]byte{}
	if err := c.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		data := make([]byte, []int{0, 100, 4096, 5000, 70 << 10, 300 << 10}[i%6])
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("/d/f%03d", i)
		f, err := c.Create(ctx, name, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			err = f.Close()
		} else {
			err = f.Sync() // acknowledged by fsync; the handle stays open
		}
		if err != nil {
			t.Fatal(err)
		}
		acked[name] = data
	}
	// Unacknowledged writes race with the kill.
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			f, err := c.Create(ctx, fmt.Sprintf("/d/late%d", i), 0o644)
			if err != nil {
				return
			}
			f.Write(make([]byte, 100<<10))
			if f.Close() != nil {
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	meta.kill()
	store.kill()
	cancel()
	c.Close()

	startServer(t, bin, "meta", file, cfg.Meta[0].Addr)
	startServer(t, bin, "store", file, cfg.Store[0].Addr)
	c2, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	for name, want := range acked {
		f, err := c2.Open(ctx2, name, os.O_RDONLY, 0)
		if err != nil {
			t.Errorf("%s lost after the crash: %v", name, err)
			continue
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Errorf("read %s after the crash: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s after the crash: %d bytes, want %d (content differs)", name, len(got), len(want))
		}
	}
}
