package cluster

import (
	"bytes"
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/internal/weftbin"
	"github.com/weftfs/weft/proto/weftpb"
)

// signalServer sends sig to a server process of p.
func signalServer(t *testing.T, p *Procs, role Role, id int, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	pr, err := p.findLocked(role, id)
	p.mu.Unlock()
	if err == nil {
		err = p.signal(pr, sig)
	}
	if err != nil {
		t.Fatalf("signal %v to %s %d: %v", sig, role, id, err)
	}
}

// storeChunks returns how many chunks store id of p holds.
func storeChunks(t *testing.T, p *Procs, id int) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, p.Config().Store[id].Addr, p.dial)
	if err != nil {
		t.Fatalf("dial store %d: %v", id, err)
	}
	defer conn.Close()
	var r weftpb.StoreStatFSReply
	if err := conn.Call(ctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &r); err != nil {
		t.Fatalf("statfs store %d: %v", id, err)
	}
	return r.Chunks
}

// TestRmKilledAfterCommitLeaksNothing: `weft rm`, a real process, is killed
// with SIGKILL after its unlink committed while the store it would delete
// from is stopped (SIGSTOP). Nothing must leak: once the store runs again,
// the meta server's reclaimer deletes every chunk of the file.
func TestRmKilledAfterCommitLeaksNothing(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 1, Durability: "sync"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.New(ClientConfig(p.Config(), core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := bytes.Repeat([]byte("weft reclaim "), 1<<20) // 13 MiB: 4 chunks
	if _, err := c.WriteFrom(ctx, "/victim", bytes.NewReader(data), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if n := storeChunks(t, p, 0); n == 0 {
		t.Fatal("the file left no chunk on the store")
	}
	signalServer(t, p, RoleStore, 0, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			signalServer(t, p, RoleStore, 0, syscall.SIGCONT)
		}
	}()
	rm := exec.Command(weftbin.Path(t), "--cluster", p.ClusterFile(), "rm", "/victim")
	if err := rm.Start(); err != nil {
		t.Fatal(err)
	}
	defer rm.Process.Kill()
	waitfor.Until(t, 30*time.Second, "weft rm commits the unlink", func() bool {
		_, err := c.Stat(ctx, "/victim")
		return errs.Is(err, errs.NotExist)
	})
	if err := rm.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill weft rm: %v (it had finished)", err)
	}
	rm.Wait()
	signalServer(t, p, RoleStore, 0, syscall.SIGCONT)
	stopped = false
	waitfor.Until(t, 40*time.Second, "the chunks of the file removed by the killed weft rm are reclaimed", func() bool {
		return storeChunks(t, p, 0) == 0
	})
}
