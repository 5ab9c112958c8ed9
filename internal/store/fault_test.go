package store

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// faultFS injects errors into the calls of the disk backend that change
// the disk: once armed, call number at (counting from 1) and, for a
// persistent fault (a full disk), every later one fails with errno; with
// short, a failing write first writes half of its bytes. ENOSPC hits only
// the calls that can need a new block on a real file system: writes that
// reach past the file's end, creations, renames and directories.
type faultFS struct {
	FS
	mu struct {
		sync.Mutex
		calls      int
		at         int // 0: disarmed
		errno      syscall.Errno
		persistent bool
		short      bool
		hit        bool
	}
}

func (f *faultFS) noSpace() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.errno == syscall.ENOSPC
}

func (f *faultFS) arm(at int, errno syscall.Errno, persistent, short bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.calls, f.mu.at, f.mu.errno, f.mu.persistent, f.mu.short, f.mu.hit = 0, at, errno, persistent, short, false
}

// disarm stops the faults and reports whether one was injected.
func (f *faultFS) disarm() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.at = 0
	return f.mu.hit
}

// fault counts a call and returns the error to inject, if any; short says
// to write part of the bytes first.
func (f *faultFS) fault(op, name string) (err error, short bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.at == 0 {
		return nil, false
	}
	f.mu.calls++
	if f.mu.calls == f.mu.at || f.mu.persistent && f.mu.calls > f.mu.at {
		f.mu.hit = true
		return &fs.PathError{Op: op, Path: name, Err: f.mu.errno}, f.mu.short
	}
	return nil, false
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 {
		if err, _ := f.fault("open", name); err != nil {
			return nil, err
		}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

func (f *faultFS) Mkdir(name string, perm fs.FileMode) error {
	if err, _ := f.fault("mkdir", name); err != nil {
		return err
	}
	return f.FS.Mkdir(name, perm)
}

func (f *faultFS) Rename(oldname, newname string) error {
	if err, _ := f.fault("rename", newname); err != nil {
		return err
	}
	return f.FS.Rename(oldname, newname)
}

type faultFile struct {
	File
	fs   *faultFS
	name string
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if fi, err := f.Stat(); err == nil && off+int64(len(p)) <= fi.Size() && f.fs.noSpace() {
		return f.File.WriteAt(p, off) // overwrites allocate nothing
	}
	err, short := f.fs.fault("pwrite", f.name)
	if err == nil {
		return f.File.WriteAt(p, off)
	}
	if short {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return 0, err
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err, _ := f.fs.fault("write", f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultFile) Truncate(size int64) error {
	if f.fs.noSpace() {
		return f.File.Truncate(size) // allocates nothing
	}
	if err, _ := f.fs.fault("ftruncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Datasync() error {
	if f.fs.noSpace() {
		return f.File.Datasync()
	}
	if err, _ := f.fs.fault("fdatasync", f.name); err != nil {
		return err
	}
	return f.File.Datasync()
}

// faultChange is a change of chunk (1, 0), whose bytes were old before,
// and the bytes it leaves when it succeeds.
type faultChange struct {
	name string
	do   func(s *Server) error
	want []byte
	// inPlace: the change overwrites bytes within the chunk's size, so a
	// block it wrote whole before failing may hold its new bytes.
	inPlace bool
}

func faultChanges(old []byte) []faultChange {
	r := rand.New(rand.NewPCG(11, 12))
	patch := randBytes(r, 2*DefaultBlockSize+300)
	over := bytes.Clone(old)
	copy(over[DefaultBlockSize-100:], patch)
	tail := randBytes(r, 3*DefaultBlockSize)
	grown := append(append(bytes.Clone(old), make([]byte, 5000)...), tail...)
	write := func(off int64, data []byte, sync bool) func(s *Server) error {
		return func(s *Server) error {
			_, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: off, Data: data, Sync: sync})
			return err
		}
	}
	truncate := func(size int64) func(s *Server) error {
		return func(s *Server) error {
			_, err := s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(1, 0), Size: size})
			return err
		}
	}
	return []faultChange{
		{"overwrite", write(DefaultBlockSize-100, patch, false), over, true},
		{"overwrite-sync", write(DefaultBlockSize-100, patch, true), over, true},
		{"grow", write(int64(len(old))+5000, tail, false), grown, false},
		{"create", func(s *Server) error {
			_, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: 100, Data: tail})
			return err
		}, append(make([]byte, 100), tail...), false},
		{"truncate-up", truncate(int64(len(old)) + 70000), append(bytes.Clone(old), make([]byte, 70000)...), false},
		{"truncate-down", truncate(1000), old[:1000], false},
	}
}

// checkAfterFault reads chunk (1, 0) after a failed change: it holds its
// bytes from before the change, or the read fails as Corrupt (a torn
// block); never other bytes, never zeros in place of data. Only an
// in-place overwrite may leave blocks it wrote whole with their new bytes.
func checkAfterFault(t *testing.T, s *Server, ch faultChange, old []byte) {
	t.Helper()
	got, err := read(s, 1, 0, 0, 1<<30)
	if err != nil {
		wantKind(t, "read after a failed change", err, errs.Corrupt)
		return
	}
	if !ch.inPlace {
		wantBytes(t, "after a failed change", got, old)
		return
	}
	want := ch.want
	if len(got) != len(old) {
		t.Fatalf("after a failed overwrite the chunk has %d bytes, not %d", len(got), len(old))
	}
	for off := 0; off < len(got); off += DefaultBlockSize {
		end := min(off+DefaultBlockSize, len(got))
		blk := got[off:end]
		if off+len(blk) <= len(old) && bytes.Equal(blk, old[off:end]) ||
			off+len(blk) <= len(want) && bytes.Equal(blk, want[off:end]) {
			continue
		}
		t.Fatalf("after a failed change, block at %d holds neither its old nor its new bytes", off)
	}
}

// TestDiskFaults fails each disk call of each kind of change in turn with
// ENOSPC (persistent: a full disk) or EIO (once), with and without a short
// write, and checks the error's kind, what a read sees afterwards, and
// that the store works once the fault is gone.
func TestDiskFaults(t *testing.T) {
	old := randBytes(rand.New(rand.NewPCG(13, 14)), 3*DefaultBlockSize+700)
	for _, ch := range faultChanges(old) {
		for _, fc := range []struct {
			errno      syscall.Errno
			persistent bool
			kind       errs.Kind
		}{{syscall.ENOSPC, true, errs.NoSpace}, {syscall.EIO, false, errs.IO}} {
			for _, short := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v/short=%v", ch.name, fc.errno, short)
				t.Run(name, func(t *testing.T) {
					for at := 1; ; at++ {
						if at > 50 {
							t.Fatal("the change never succeeds")
						}
						ffs := &faultFS{FS: OSFS()}
						s := openStore(t, Config{Backend: "disk", Dir: t.TempDir(), FS: ffs})
						before := old
						if ch.name == "create" {
							before = nil
						} else {
							mustWrite(t, s, 1, 0, 0, old)
						}
						ffs.arm(at, fc.errno, fc.persistent, short)
						err := ch.do(s)
						if !ffs.disarm() {
							if err != nil {
								t.Fatalf("no fault injected, yet: %v", err)
							}
							wantBytes(t, "after the change", mustRead(t, s, 1, 0, 0, 1<<30), ch.want)
							return // every call of the change has failed once
						}
						if err == nil {
							// Only the last table write may fail without
							// failing the change (the state and the
							// entries' second slots already vouch for
							// it); then the change is whole.
							wantBytes(t, fmt.Sprintf("change that absorbed a failed call %d", at), mustRead(t, s, 1, 0, 0, 1<<30), ch.want)
						} else {
							wantKind(t, fmt.Sprintf("change with call %d failing", at), err, fc.kind)
							checkAfterFault(t, s, ch, before)
						}
						// The store works again once the fault is gone.
						mustWrite(t, s, 1, 0, 0, ch.want)
						mustTruncate(t, s, 1, 0, int64(len(ch.want)))
						wantBytes(t, "rewrite after the fault", mustRead(t, s, 1, 0, 0, 1<<30), ch.want)
						s.Close()
					}
				})
			}
		}
	}
}

// TestSameHostNoSpace: a full disk under a same-host write reaches the
// client as errs.NoSpace (ENOSPC at its mount), not as EIO.
func TestSameHostNoSpace(t *testing.T) {
	ffs := &faultFS{FS: OSFS()}
	s := openStore(t, Config{Backend: "disk", Dir: t.TempDir(), FS: ffs})
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 100000)
	src := tempFile(t, "src", data, os.O_RDONLY)
	ffs.arm(1, syscall.ENOSPC, true, false)
	_, err := localIO(t, s, &weftpb.LocalIORequest{Write: true, Chunk: cid(2, 0), Length: int64(len(data))}, src)
	ffs.disarm()
	wantKind(t, "same-host write on a full disk", err, errs.NoSpace)
	r, _, err := readReply(s, 2, 0, 0, 1<<20)
	if err != nil || r.ChunkSize != 0 {
		t.Fatalf("after the failed write: %v, %v", r, err)
	}
}
