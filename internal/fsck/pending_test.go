package fsck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestUnfinishedIntentIsPending leaves, in a stopped cluster, a
// cross-server operation half applied: an entry on one server names an
// inode whose record the coordinator's intent still has to write on
// another. fsck must report the operation as unfinished, not the entry as
// dangling, and --repair must leave it alone; once the coordinator runs
// again and finishes it, the cluster is clean.
func TestUnfinishedIntentIsPending(t *testing.T) {
	tc, tr := newTree(t)
	ghost := core.MakeIno(1, 1<<40)
	ss := tc.open()
	srv, p := ss.place(t, tr.d, "ghost")
	ss.apply(t, srv, &weftpb.KeyOp{Key: layout.EntryKey(tr.d, p, "ghost"), Value: marshal(&weftpb.EntryRecord{Ino: uint64(ghost), Mode: core.ModeFile | 0o644})},
		ss.count(t, srv, tr.d, 1, 0))
	ss.close()
	rec := &weftpb.InodeRecord{Mode: core.ModeFile | 0o644, Nlink: 1, Inline: true,
		Links: []*weftpb.LinkRef{{Parent: uint64(tr.d), Name: []byte("ghost")}}}
	intent := &weftpb.Intent{Op: "link", Servers: []*weftpb.ServerOps{{Server: 1, Ops: []*weftpb.KeyOp{
		{Key: layout.InodeKey(ghost), Value: marshal(rec), InodeDelta: 1}}}}}
	writeRaw(t, tc.cfg.Meta[0].Dir, binary.BigEndian.AppendUint64([]byte{layout.TagIntent}, 1<<48|7), marshal(intent))

	for _, repair := range []bool{false, true} {
		r := tc.check(repair)
		if len(r.Findings) > 0 || len(r.Pending) != 1 || r.Clean() {
			t.Fatalf("repair %v: want one unfinished operation and no findings:%s", repair, describe(r))
		}
	}
	tc.start() // meta 0 finishes the operation in the background
	if r := tc.check(false); !r.Clean() || len(r.Findings) > 0 {
		t.Fatalf("after the coordinator restarted:%s", describe(r))
	}
	if _, err := tc.client().Stat(ctx, "/d/ghost"); err != nil {
		t.Fatal(err)
	}
}

// writeRaw writes key into the Pebble store in dir, as a meta server
// would (keys fsck and meta.Offline never write).
func writeRaw(t *testing.T, dir string, key, val []byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{
		FormatMajorVersion: pebble.FormatValueSeparation,
		Merger:             &pebble.Merger{Name: "weft.counter.v1", Merge: newCounterSum},
		Logger:             quietLogger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Set(key, val, pebble.Sync)
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
}

// counterSum is internal/meta's counter merger (docs/format.md), which a
// store must be opened with.
type counterSum struct{ sum int64 }

func newCounterSum(_, value []byte) (pebble.ValueMerger, error) {
	c := &counterSum{}
	return c, c.MergeNewer(value)
}

func (c *counterSum) MergeNewer(v []byte) error {
	if len(v) != 8 {
		return errors.New("counter operand is not 8 bytes")
	}
	c.sum += int64(binary.LittleEndian.Uint64(v))
	return nil
}

func (c *counterSum) MergeOlder(v []byte) error { return c.MergeNewer(v) }

func (c *counterSum) Finish(bool) ([]byte, io.Closer, error) {
	return binary.LittleEndian.AppendUint64(nil, uint64(c.sum)), nil, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
