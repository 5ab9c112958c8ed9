package store

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// The model test runs random operations against a store with tiny blocks
// and chunks (so that every operation spans, splits and grows blocks) and
// against a map of byte slices, and compares every answer.

const (
	modelBlock    = 16
	modelMaxChunk = 300
	modelMemLimit = 1500 // below 2 inodes x 3 chunks x 300: NoSpace happens
)

type storeModel struct {
	s        *Server
	cfg      Config
	chunks   map[ChunkKey][]byte
	versions map[ChunkKey]uint64 // as the store last reported them
	limited  bool                // the mem backend: changes beyond modelMemLimit are refused
}

func (m *storeModel) used() int64 {
	var n int64
	for _, c := range m.chunks {
		n += int64(len(c))
	}
	return n
}

// resize returns what the model says chunk k becomes at size, or false if
// the mem limit refuses it.
func (m *storeModel) admits(k ChunkKey, size int64) bool {
	return !m.limited || m.used()-int64(len(m.chunks[k]))+size <= modelMemLimit
}

func (m *storeModel) open(t *rapid.T) {
	m.cfg.Registry = prometheus.NewRegistry()
	s, err := Open(m.cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	m.s = s
}

func genKey(t *rapid.T) ChunkKey {
	return ChunkKey{Ino: rapid.Uint64Range(1, 2).Draw(t, "ino"), Index: rapid.Uint64Range(0, 2).Draw(t, "index")}
}

func (m *storeModel) write(t *rapid.T) {
	k := genKey(t)
	off := rapid.Int64Range(0, modelMaxChunk+20).Draw(t, "off")
	data := rapid.SliceOfN(rapid.Byte(), 0, 70).Draw(t, "data")
	_, err := m.s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{
		Chunk: cid(k.Ino, k.Index), Offset: off, Data: data,
		Sync: rapid.Bool().Draw(t, "sync"), WriteBehind: rapid.Bool().Draw(t, "write behind"),
	})
	end := off + int64(len(data))
	old := m.chunks[k]
	switch {
	case end > modelMaxChunk:
		wantKindT(t, "write beyond max", err, errs.Invalid)
	case len(data) == 0:
		noErr(t, "empty write", err)
	case !m.admits(k, max(end, int64(len(old)))):
		wantKindT(t, "write over the mem limit", err, errs.NoSpace)
	default:
		noErr(t, "write", err)
		if end > int64(len(old)) {
			old = append(old, make([]byte, end-int64(len(old)))...)
		}
		copy(old[off:], data)
		m.chunks[k] = old
		m.changed(t, k)
	}
}

// changed checks that the change just made to chunk k raised its version
// and recorded its size, as ListChunks reports them.
func (m *storeModel) changed(t *rapid.T, k ChunkKey) {
	r, err := m.s.ListChunks(context.Background(), &weftpb.ListChunksRequest{Ino: k.Ino, After: cid(k.Ino, k.Index-1)})
	if k.Index == 0 {
		r, err = m.s.ListChunks(context.Background(), &weftpb.ListChunksRequest{Ino: k.Ino})
	}
	noErr(t, "list", err)
	if len(r.Chunks) == 0 || r.Chunks[0].Chunk.GetIndex() != k.Index {
		t.Fatalf("chunk %v changed but not listed: %v", k, r)
	}
	c := r.Chunks[0]
	if c.Version <= m.versions[k] || c.Size != int64(len(m.chunks[k])) {
		t.Fatalf("chunk %v after a change: version %d (was %d), size %d (model %d)", k, c.Version, m.versions[k], c.Size, len(m.chunks[k]))
	}
	m.versions[k] = c.Version
}

func (m *storeModel) read(t *rapid.T) {
	k := genKey(t)
	off := rapid.Int64Range(0, modelMaxChunk+10).Draw(t, "off")
	n := rapid.Int64Range(0, 400).Draw(t, "n")
	r, err := m.s.ReadChunk(context.Background(), &weftpb.ReadChunkRequest{Chunk: cid(k.Ino, k.Index), Offset: off, Length: n})
	if off > modelMaxChunk {
		wantKindT(t, "read beyond max", err, errs.Invalid)
		return
	}
	noErr(t, "read", err)
	c, found := m.chunks[k]
	if r.Found != found || r.ChunkSize != int64(len(c)) || r.Version != m.versions[k] {
		t.Fatalf("read %v: found %v size %d version %d, model: %v %d %d", k, r.Found, r.ChunkSize, r.Version, found, len(c), m.versions[k])
	}
	want := c[min(off, int64(len(c))):min(off+n, int64(len(c)))]
	if !bytes.Equal(r.GetData(), want) {
		t.Fatalf("read %v [%d,+%d) = %x, want %x", k, off, n, r.GetData(), want)
	}
}

func (m *storeModel) truncate(t *rapid.T) {
	k := genKey(t)
	size := rapid.Int64Range(0, modelMaxChunk+5).Draw(t, "size")
	_, err := m.s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(k.Ino, k.Index), Size: size})
	old, had := m.chunks[k]
	switch {
	case size > modelMaxChunk:
		wantKindT(t, "truncate beyond max", err, errs.Invalid)
	case !had:
		noErr(t, "truncate of a missing chunk", err) // and it stays missing
	case !m.admits(k, size):
		wantKindT(t, "truncate over the mem limit", err, errs.NoSpace)
	case size == 0:
		noErr(t, "truncate", err)
		delete(m.chunks, k)
		delete(m.versions, k) // a chunk made again starts over
	default:
		noErr(t, "truncate", err)
		if size <= int64(len(old)) {
			m.chunks[k] = old[:size:size]
		} else {
			m.chunks[k] = append(old, make([]byte, size-int64(len(old)))...)
		}
		m.changed(t, k)
	}
}

func (m *storeModel) deleteChunks(t *rapid.T) {
	ino := rapid.Uint64Range(1, 2).Draw(t, "ino")
	from := rapid.Uint64Range(0, 3).Draw(t, "from")
	r, err := m.s.DeleteChunks(context.Background(), &weftpb.DeleteChunksRequest{Ino: ino, From: from})
	noErr(t, "delete", err)
	var want uint64
	for k := range m.chunks {
		if k.Ino == ino && k.Index >= from {
			delete(m.chunks, k)
			delete(m.versions, k)
			want++
		}
	}
	if r.GetDeleted() != want {
		t.Fatalf("delete %d from %d: deleted %d, want %d", ino, from, r.GetDeleted(), want)
	}
}

func (m *storeModel) check(t *rapid.T) {
	st, err := m.s.StatFS(context.Background(), nil)
	noErr(t, "statfs", err)
	if st.Chunks != uint64(len(m.chunks)) {
		t.Fatalf("statfs chunks = %d, model has %d", st.Chunks, len(m.chunks))
	}
	if m.limited && st.Used != uint64(m.used()) {
		t.Fatalf("statfs used = %d, model has %d", st.Used, m.used())
	}
}

func noErr(t *rapid.T, what string, err error) {
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantKindT(t *rapid.T, what string, err error, k errs.Kind) {
	if !errs.Is(err, k) {
		t.Fatalf("%s: got %v, want kind %v", what, err, k)
	}
}

func TestModel(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		rapid.Check(t, func(rt *rapid.T) {
			m := &storeModel{chunks: map[ChunkKey][]byte{}, versions: map[ChunkKey]uint64{}, limited: true,
				cfg: Config{Backend: "mem", MemLimit: modelMemLimit, MaxChunkSize: modelMaxChunk, blockSize: modelBlock}}
			m.open(rt)
			defer m.s.Close()
			rt.Repeat(m.actions(nil))
		})
	})
	t.Run("disk", func(t *testing.T) {
		base := t.TempDir()
		rapid.Check(t, func(rt *rapid.T) {
			dir, err := os.MkdirTemp(base, "case")
			if err != nil {
				rt.Fatal(err)
			}
			defer os.RemoveAll(dir)
			m := &storeModel{chunks: map[ChunkKey][]byte{}, versions: map[ChunkKey]uint64{},
				cfg: Config{Backend: "disk", Dir: dir, MaxChunkSize: modelMaxChunk, blockSize: modelBlock, noFsync: true}}
			m.open(rt)
			defer func() { m.s.Close() }()
			rt.Repeat(m.actions(map[string]func(*rapid.T){
				"restart": func(t *rapid.T) {
					noErr(t, "close", m.s.Close())
					m.open(t)
				},
				"sync": func(t *rapid.T) {
					_, err := m.s.SyncChunks(context.Background(), &weftpb.SyncChunksRequest{Ino: rapid.Uint64Range(1, 2).Draw(t, "ino")})
					noErr(t, "sync", err)
				},
			}))
		})
	})
}

func (m *storeModel) actions(extra map[string]func(*rapid.T)) map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		"write":    m.write,
		"read":     m.read,
		"truncate": m.truncate,
		"delete":   m.deleteChunks,
		"":         m.check,
	}
	for name, f := range extra {
		a[name] = f
	}
	return a
}
