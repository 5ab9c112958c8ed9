package meta

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// scanAll walks the whole keyspace (or [start, end)) page by page.
func scanAll(t *testing.T, scan func(*weftpb.ScanRequest) (*weftpb.ScanReply, error), start, end []byte, limit uint32) (keys [][]byte, pages int) {
	t.Helper()
	req := &weftpb.ScanRequest{Start: start, End: end, Limit: limit}
	for {
		r, err := scan(req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, p := range r.Pairs {
			keys = append(keys, p.Key)
		}
		if r.Eof {
			return keys, pages
		}
		if len(r.Pairs) == 0 {
			t.Fatal("a reply that is not eof returned nothing")
		}
		req = &weftpb.ScanRequest{After: r.Pairs[len(r.Pairs)-1].Key, End: end, Limit: limit}
	}
}

func TestScanPagesInKeyOrder(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	for i := range 25 {
		e.create(rootCreds(), d.Ino, fmt.Sprintf("f%d", i), 0o644)
	}
	scan := func(req *weftpb.ScanRequest) (*weftpb.ScanReply, error) { return e.Scan(ctx, req) }
	all, pages := scanAll(t, scan, nil, nil, 0)
	if pages != 1 {
		t.Errorf("default limit: %d pages for %d keys", pages, len(all))
	}
	paged, pages := scanAll(t, scan, nil, nil, 4)
	if pages < len(all)/4 || len(paged) != len(all) {
		t.Fatalf("limit 4: %d keys in %d pages, want %d keys", len(paged), pages, len(all))
	}
	for i := range all {
		if !bytes.Equal(all[i], paged[i]) || i > 0 && bytes.Compare(all[i-1], all[i]) >= 0 {
			t.Fatalf("key %d: %q / %q, not in order", i, all[i], paged[i])
		}
	}
	// A range: the directory's entries only.
	p := dirPrefix(core.Ino(d.Ino))
	ents, _ := scanAll(t, scan, p, prefixEnd(p), 7)
	if len(ents) != 25 {
		t.Fatalf("entries of d: %d keys, want 25", len(ents))
	}
	// An empty range, and a start past the end.
	if r, err := e.Scan(ctx, &weftpb.ScanRequest{Start: []byte("z"), End: []byte("a")}); err != nil || !r.Eof || len(r.Pairs) != 0 {
		t.Fatalf("start after end: %v %v", r, err)
	}
	// A limit above the maximum is the maximum, not an error.
	if _, err := e.Scan(ctx, &weftpb.ScanRequest{Limit: 1 << 30}); err != nil {
		t.Fatal(err)
	}
}

func TestOfflineStore(t *testing.T) {
	e := newEnv(t)
	if _, err := OpenOffline(e.dir); err == nil {
		t.Fatal("opened the store of a running server")
	}
	if _, err := OpenOffline(t.TempDir()); !errs.Is(err, errs.NotExist) {
		t.Fatalf("empty directory: %v", err)
	}
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	if err := e.Server.Close(); err != nil {
		t.Fatal(err)
	}
	e.Server = nil
	o, err := OpenOffline(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	key := inodeKey(core.Ino(d.Ino))
	r, err := o.Scan(&weftpb.ScanRequest{Start: key, End: append(bytes.Clone(key), 0)})
	if err != nil || len(r.Pairs) != 1 {
		t.Fatalf("scan one key: %v %v", r, err)
	}
	if err := o.Apply([]*weftpb.KeyOp{{Key: key, Delete: true}}); err != nil {
		t.Fatal(err)
	}
	if err := o.Apply([]*weftpb.KeyOp{{Key: keyFormat, Delete: true}}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("apply to a system key: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	if e.hasInodeRecord(d.Ino) {
		t.Fatal("the record deleted offline is back")
	}
}

func TestIntentWrites(t *testing.T) {
	e := newEnv(t)
	b := e.db.NewBatch()
	defer b.Close()
	b.Set(inodeKey(7), []byte("v"), nil)
	b.Delete(entryKey(7, 0, "n"), nil)
	b.Merge(keyInodes, counterDelta(1), nil)
	in := &weftpb.Intent{Op: "rename", LocalBatch: b.Repr(), Servers: []*weftpb.ServerOps{
		{Server: 1, Ops: []*weftpb.KeyOp{{Key: xattrKey(9, "user.a"), Value: []byte("x")}}},
	}}
	ops, err := IntentWrites(mustMarshal(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 || !bytes.Equal(ops[0].Key, xattrKey(9, "user.a")) ||
		!bytes.Equal(ops[1].Key, inodeKey(7)) || string(ops[1].Value) != "v" ||
		!bytes.Equal(ops[2].Key, entryKey(7, 0, "n")) || !ops[2].Delete {
		t.Fatalf("writes: %v", ops)
	}
	if _, err := IntentWrites([]byte{0xff}); err == nil {
		t.Fatal("garbage decoded")
	}
}
