package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
	"pgregory.net/rapid"
)

// modelFile is the model's file content, shared by hard links.
type modelFile struct{ data []byte }

// model is an in-memory namespace: every path names a directory (nil file)
// or a file.
type model struct {
	dirs  map[string]bool
	files map[string]*modelFile
}

func (m *model) exists(p string) bool { return m.dirs[p] || m.files[p] != nil }

func (m *model) children(dir string) []string {
	var out []string
	for p := range m.dirs {
		if p != dir && parentOf(p) == dir {
			out = append(out, p[strings.LastIndexByte(p, '/')+1:])
		}
	}
	for p := range m.files {
		if parentOf(p) == dir {
			out = append(out, p[strings.LastIndexByte(p, '/')+1:])
		}
	}
	sort.Strings(out)
	return out
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// TestModel runs random sequences of namespace and data operations against
// a real cluster and an in-memory model, comparing results and error kinds
// after every step.
func TestModel(t *testing.T) {
	runModel(t, newTestClient(t, 64<<10))
}

// TestModelGiga runs the model against four meta servers that split every
// directory past two entries, so that splits, redirects and cross-server
// renames, links and removes happen all the time.
func TestModelGiga(t *testing.T) {
	splitBitsCases(t, modelGiga)
}

func modelGiga(t *testing.T, bits int) {
	c, _ := newMultiClient(t, 4, 2, bits, 64<<10)
	runModel(t, c)
	if c.Redirects() == 0 {
		t.Error("no request was redirected: the partition maps were never stale")
	}
	var splits uint64
	for i := range 4 {
		st, err := c.MetaStatus(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		splits += st.Splits
		if st.Partitions == 0 {
			t.Errorf("meta server %d holds no partition", i)
		}
	}
	if splits == 0 {
		t.Error("no directory split")
	}
	t.Logf("%d splits, %d redirects", splits, c.Redirects())
}

func runModel(t *testing.T, c *client.Client) {
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		root := fmt.Sprintf("/run%d", run)
		if err := c.Mkdir(ctx, root, 0o755); err != nil {
			rt.Fatalf("mkdir root: %v", err)
		}
		m := &model{dirs: map[string]bool{root: true}, files: map[string]*modelFile{}}
		names := []string{"a", "b", "c", "d"}
		anyPath := func(rt *rapid.T) string {
			depth := rapid.IntRange(1, 3).Draw(rt, "depth")
			p := root
			for range depth {
				p = join(p, rapid.SampledFrom(names).Draw(rt, "name"))
			}
			return p
		}
		expectKind := func(op string, err error, want errs.Kind, ok bool) {
			if ok {
				if err != nil {
					rt.Fatalf("%s: unexpected error %v", op, err)
				}
				return
			}
			if err == nil || errs.KindOf(err) != want {
				rt.Fatalf("%s: got error %v, want kind %q", op, err, want)
			}
		}
		// parentOK reports the kind a create under p fails with, if any.
		parentOK := func(p string) (errs.Kind, bool) {
			dir := parentOf(p)
			if m.files[dir] != nil {
				return errs.NotDir, false
			}
			if !m.dirs[dir] {
				// an ancestor may be a file: then the walk fails with NotDir
				for d := parentOf(dir); d != "/" && d != root; d = parentOf(d) {
					if m.files[d] != nil {
						return errs.NotDir, false
					}
				}
				if m.files[parentOf(dir)] != nil {
					return errs.NotDir, false
				}
				return errs.NotExist, false
			}
			return 0, true
		}
		rt.Repeat(map[string]func(*rapid.T){
			"mkdir": func(rt *rapid.T) {
				p := anyPath(rt)
				err := c.Mkdir(ctx, p, 0o755)
				if k, ok := parentOK(p); !ok {
					expectKind("mkdir "+p, err, k, false)
					return
				}
				if m.exists(p) {
					expectKind("mkdir "+p, err, errs.Exist, false)
					return
				}
				expectKind("mkdir "+p, err, 0, true)
				m.dirs[p] = true
			},
			"write": func(rt *rapid.T) {
				p := anyPath(rt)
				off := rapid.Int64Range(0, 200<<10).Draw(rt, "off")
				n := rapid.IntRange(0, 150<<10).Draw(rt, "n")
				data := bytes.Repeat([]byte{byte(rapid.IntRange(1, 255).Draw(rt, "byte"))}, n)
				f, err := c.Open(ctx, p, os.O_WRONLY|os.O_CREATE, 0o644)
				if k, ok := parentOK(p); !ok {
					expectKind("open "+p, err, k, false)
					return
				}
				if m.dirs[p] {
					expectKind("open "+p, err, errs.IsDir, false)
					return
				}
				expectKind("open "+p, err, 0, true)
				if _, err := f.WriteAt(data, off); err != nil {
					rt.Fatalf("write %s: %v", p, err)
				}
				if err := f.Close(); err != nil {
					rt.Fatalf("close %s: %v", p, err)
				}
				mf := m.files[p]
				if mf == nil {
					mf = &modelFile{}
					m.files[p] = mf
				}
				if end := off + int64(n); n > 0 && int64(len(mf.data)) < end {
					mf.data = append(mf.data, make([]byte, end-int64(len(mf.data)))...)
				}
				if n > 0 {
					copy(mf.data[off:], data)
				}
			},
			"truncate": func(rt *rapid.T) {
				p := anyPath(rt)
				size := rapid.Int64Range(0, 300<<10).Draw(rt, "size")
				err := c.Truncate(ctx, p, size)
				mf := m.files[p]
				if mf == nil {
					if m.dirs[p] {
						expectKind("truncate "+p, err, errs.IsDir, false)
					} else if err == nil {
						rt.Fatalf("truncate %s: no error on a missing file", p)
					}
					return
				}
				expectKind("truncate "+p, err, 0, true)
				if int64(len(mf.data)) > size {
					mf.data = mf.data[:size]
				} else {
					mf.data = append(mf.data, make([]byte, size-int64(len(mf.data)))...)
				}
			},
			"read": func(rt *rapid.T) {
				p := anyPath(rt)
				mf := m.files[p]
				if mf == nil {
					return
				}
				f, err := c.Open(ctx, p, os.O_RDONLY, 0)
				if err != nil {
					rt.Fatalf("open %s: %v", p, err)
				}
				defer f.Close()
				got, err := io.ReadAll(f)
				if err != nil {
					rt.Fatalf("read %s: %v", p, err)
				}
				if !bytes.Equal(got, mf.data) {
					rt.Fatalf("read %s: %d bytes differ from the model's %d", p, len(got), len(mf.data))
				}
			},
			"unlink": func(rt *rapid.T) {
				p := anyPath(rt)
				err := c.Unlink(ctx, p)
				switch {
				case m.files[p] != nil:
					expectKind("unlink "+p, err, 0, true)
					delete(m.files, p)
				case m.dirs[p]:
					expectKind("unlink "+p, err, errs.IsDir, false)
				default:
					if err == nil {
						rt.Fatalf("unlink %s: no error on a missing name", p)
					}
				}
			},
			"rmdir": func(rt *rapid.T) {
				p := anyPath(rt)
				err := c.Rmdir(ctx, p)
				switch {
				case m.dirs[p] && len(m.children(p)) > 0:
					expectKind("rmdir "+p, err, errs.NotEmpty, false)
				case m.dirs[p]:
					expectKind("rmdir "+p, err, 0, true)
					delete(m.dirs, p)
				case m.files[p] != nil:
					expectKind("rmdir "+p, err, errs.NotDir, false)
				default:
					if err == nil {
						rt.Fatalf("rmdir %s: no error on a missing name", p)
					}
				}
			},
			"link": func(rt *rapid.T) {
				src, dst := anyPath(rt), anyPath(rt)
				if m.files[src] == nil || m.exists(dst) {
					return
				}
				if _, ok := parentOK(dst); !ok {
					return
				}
				if err := c.Link(ctx, src, dst); err != nil {
					rt.Fatalf("link %s %s: %v", src, dst, err)
				}
				m.files[dst] = m.files[src]
			},
			"rename": func(rt *rapid.T) {
				src, dst := anyPath(rt), anyPath(rt)
				if !m.exists(src) || strings.HasPrefix(dst+"/", src+"/") || strings.HasPrefix(src+"/", dst+"/") {
					return
				}
				if _, ok := parentOK(dst); !ok {
					return
				}
				err := c.Rename(ctx, src, dst, 0)
				switch {
				case m.files[src] != nil && m.files[src] == m.files[dst]:
					expectKind("rename to a link of itself", err, 0, true) // POSIX: nothing happens
					return
				case m.dirs[src] && m.files[dst] != nil:
					expectKind("rename", err, errs.NotDir, false)
					return
				case m.files[src] != nil && m.dirs[dst]:
					expectKind("rename", err, errs.IsDir, false)
					return
				case m.dirs[dst] && len(m.children(dst)) > 0:
					expectKind("rename", err, errs.NotEmpty, false)
					return
				}
				expectKind(fmt.Sprintf("rename %s %s", src, dst), err, 0, true)
				if m.files[src] != nil {
					m.files[dst] = m.files[src]
					delete(m.files, src)
					return
				}
				delete(m.dirs, dst)
				moved := map[string]bool{}
				for p := range m.dirs {
					if p == src || strings.HasPrefix(p, src+"/") {
						moved[dst+p[len(src):]] = true
						delete(m.dirs, p)
					}
				}
				for p := range moved {
					m.dirs[p] = true
				}
				files := map[string]*modelFile{}
				for p, f := range m.files {
					if strings.HasPrefix(p, src+"/") {
						files[dst+p[len(src):]] = f
						delete(m.files, p)
					}
				}
				for p, f := range files {
					m.files[p] = f
				}
			},
			"": func(rt *rapid.T) {
				// Invariant: every model directory lists exactly its children,
				// and every file's size matches.
				for d := range m.dirs {
					ents, err := c.ReadDir(ctx, d)
					if err != nil {
						rt.Fatalf("readdir %s: %v", d, err)
					}
					var got []string
					for _, e := range ents {
						got = append(got, e.Name)
					}
					sort.Strings(got)
					if want := m.children(d); strings.Join(got, ",") != strings.Join(want, ",") {
						rt.Fatalf("readdir %s: got %v, want %v", d, got, want)
					}
				}
				for p, f := range m.files {
					a, err := c.Stat(ctx, p)
					if err != nil {
						rt.Fatalf("stat %s: %v", p, err)
					}
					if a.Size != uint64(len(f.data)) {
						rt.Fatalf("stat %s: size %d, model %d", p, a.Size, len(f.data))
					}
				}
			},
		})
	})
}
