package fusefs

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// BenchmarkCallCtx is what every FUSE request pays before it reaches the
// client: the caller's credentials (cached per thread), its patchgroups,
// and a context bounded by OpTimeout under the mount's life.
func BenchmarkCallCtx(b *testing.B) {
	life, stop := context.WithCancel(context.Background())
	defer stop()
	fsys := &fileSystem{opts: Options{OpTimeout: time.Minute}, life: life, groups: newGroupCache(), pg: newPGTable(nil)}
	req := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: uint32(os.Getpid())})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, cancel := fsys.callCtx(req)
			cancel()
		}
	})
}
