package meta

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weftfs/weft/proto/weftpb"
)

// runParallel16 runs b.N calls of op spread over 16 goroutines.
func runParallel16(b *testing.B, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkCreateSync16: 16 goroutines create zero-length files in one
// directory, sync mode (every create acknowledged after its WAL fsync).
func BenchmarkCreateSync16(b *testing.B) {
	e := newEnv(b)
	d := e.mkdir(rootCreds(), root, "d", 0o777)
	runParallel16(b, func(i int) error {
		_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: d.Ino, Name: "file" + itoa(i), Mode: 0o644, Exclusive: true})
		return err
	})
}

// BenchmarkCreateSyncMem16 is BenchmarkCreateSync16 on an in-memory file
// system: the server's CPU cost without the disk's fsync time (the noise on
// a shared machine), e.g. of the commit gate (health.go).
func BenchmarkCreateSyncMem16(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.FS, c.Dir = vfs.NewMem(), "/meta" })
	d := e.mkdir(rootCreds(), root, "d", 0o777)
	runParallel16(b, func(i int) error {
		_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: d.Ino, Name: "file" + itoa(i), Mode: 0o644, Exclusive: true})
		return err
	})
}

// BenchmarkCreateAsync16 is the same in async mode.
func BenchmarkCreateAsync16(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Durability = DurabilityAsync })
	d := e.mkdir(rootCreds(), root, "d", 0o777)
	runParallel16(b, func(i int) error {
		_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: d.Ino, Name: "file" + itoa(i), Mode: 0o644, Exclusive: true})
		return err
	})
}

// BenchmarkRawPebbleSync16: 16 goroutines doing synced single-key Sets of
// keys and values shaped like entries, the floor for BenchmarkCreateSync16.
func BenchmarkRawPebbleSync16(b *testing.B) {
	db, err := openPebble(b.TempDir(), storeOptions{fs: vfs.Default, log: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 60)
	runParallel16(b, func(i int) error {
		k := entryKey(2, 0, "file"+itoa(i))
		binary.BigEndian.PutUint64(value, uint64(i))
		return db.Set(k, value, pebble.Sync)
	})
}

// BenchmarkCreateIndex16 is BenchmarkCreateSync16 (on disk, each create
// after its WAL fsync) and BenchmarkCreateSyncMem16 (the server's CPU cost
// alone), each with and without the search index: what the index costs.
func BenchmarkCreateIndex16(b *testing.B) {
	for _, disk := range []bool{true, false} {
		for _, noIndex := range []bool{false, true} {
			name := map[bool]string{true: "disk", false: "mem"}[disk] + map[bool]string{false: "/index", true: "/no-index"}[noIndex]
			b.Run(name, func(b *testing.B) {
				e := newEnv(b, func(c *Config) {
					c.NoSearchIndex = noIndex
					if !disk {
						c.FS, c.Dir = vfs.NewMem(), "/meta"
					}
				})
				d := e.mkdir(rootCreds(), root, "d", 0o777)
				runParallel16(b, func(i int) error {
					_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: d.Ino, Name: "file" + itoa(i), Mode: 0o644, Exclusive: true})
					return err
				})
			})
		}
	}
}
