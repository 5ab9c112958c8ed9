package fusefs

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/waitfor"
)

// The causes of the violations the random three-mount history
// (TestLinearizableThreeMounts) found, one deterministic test each: every
// test here failed before its fix.

// TestListingAfterRecall: a listing whose page was read under a read lease
// that another mount's change then recalled must not hand the kernel that
// page's attributes for the default timeout. The kernel forgot the name
// when the lease was recalled; READDIRPLUS put it back, with the old mode,
// and a stat after the chmod returned saw 644 (linz: stat(a/y) -> mode 644
// after chmod(a/y 604) returned on another mount).
func TestListingAfterRecall(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(a+"/f", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b + "/f"); err != nil {
		t.Fatal(err)
	}
	// OPENDIR reads the first page under b's lease on the directory.
	d, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Chmod(a+"/f", 0o600); err != nil {
		t.Fatal(err)
	}
	// READDIRPLUS now hands the kernel the page read before the chmod.
	if _, err := d.ReadDir(-1); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(b + "/f")
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("stat after chmod returned on another mount: mode %o, want 600", m)
	}
}

// TestOpenFileRenamedElsewhere: a file open on one mount and renamed by
// another is still the open file: a reread through the descriptor sees what
// the other mount wrote there and closed, and a write and close through it
// land on the file under its new name. The client addressed an open file by
// the name it was opened under, so the reread kept the old content and the
// close failed with ENOENT (linz: reread(ino 53) -> "C015" after "B010" was
// written and closed under the file's new name; and the history's "closes
// failed after another mount renamed or removed the file").
func TestOpenFileRenamedElsewhere(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.Mkdir(a+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(a+"/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reread := rereader(t, held)
	reread("v1")
	// Renamed into another directory by mount b, then changed there.
	if err := os.Rename(b+"/f", b+"/d/g"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/d/g", []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("v2")
	// And once more, after the descriptor found it: mount b changes it
	// again in its new directory.
	if err := os.WriteFile(b+"/d/g", []byte("v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("v3")
	// A write and close through the descriptor reach the file.
	if _, err := held.WriteAt([]byte("v4"), 0); err != nil {
		t.Fatal(err)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("close after another mount renamed the file: %v", err)
	}
	if got, err := os.ReadFile(b + "/d/g"); err != nil || string(got) != "v4" {
		t.Errorf("mount b reads %q, %v; want the write closed on mount a, \"v4\"", got, err)
	}
}

// TestOpenFileReplacedElsewhere: a file open on one mount that another
// mount removed, and whose name now holds a new file, is gone: a write and
// close through the descriptor fail with ENOENT (the file has no name), not
// ESTALE (which says "look the name up again"), and the new file keeps its
// content.
func TestOpenFileReplacedElsewhere(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(a+"/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.Remove(b + "/f"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/f", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := held.WriteAt([]byte("v2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := held.Close(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("close of a file another mount removed: %v, want ENOENT", err)
	}
	if got, err := os.ReadFile(b + "/f"); err != nil || string(got) != "new" {
		t.Errorf("the new file: %q, %v; want \"new\"", got, err)
	}
}

// TestChmodOfFileOpenHereAfterOtherWrite: a chmod on a mount where the file
// is open reports the size the server has, not the one the open read: the
// setattr reply put the open state's size (from before another mount's
// write and close) in the kernel's cache, and a reread then ended at 0
// (linz: reread(ino 14) -> "" right after this mount's chmod).
func TestChmodOfFileOpenHereAfterOtherWrite(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(a+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(b+"/f", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a+"/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(a + "/f"); err != nil || st.Size() != 4 {
		t.Errorf("stat after the chmod: %v, %v; want size 4", st.Size(), err)
	}
	buf := make([]byte, 16)
	n, _ := held.ReadAt(buf, 0)
	if got := string(buf[:n]); got != "data" {
		t.Errorf("reread through the descriptor: %q, want \"data\"", got)
	}
}

// TestGetattrOfFileRenamedElsewhere: the attributes of a file open here
// that another mount renamed into a directory this mount never looked at
// are cached under the lease of the directory they were read in, not the
// one the kernel's tree still puts the file in. The mount took the lease on
// the old directory (the node's place in go-fuse's tree), the client found
// the file under its new name (locate), and the kernel kept its size for
// the lease's term: a write and close there by the other mount recalled a
// key this mount did not hold, and a reread returned nothing with no
// request (linz, cause 3: reread -> "" 8 µs after the write+close
// returned).
func TestGetattrOfFileRenamedElsewhere(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.Mkdir(a+"/d1", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a+"/d1/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Made by b: mount a never looks into d2.
	if err := os.Mkdir(b+"/d2", 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/d1/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reread := rereader(t, held)
	reread("")
	if err := os.Rename(b+"/d1/f", b+"/d2/g"); err != nil {
		t.Fatal(err)
	}
	// The rename's recall made the kernel forget the size: this reread
	// asks for it (GETATTR; the file is empty, so no READ follows).
	reread("")
	if err := os.WriteFile(b+"/d2/g", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("data")
}

// TestChmodThroughStaleDentry: a chmod by a name another mount renamed
// away fails with ENOENT on this mount even while the kernel still has the
// name cached. This mount's own rename into the directory was in flight
// when the other mount's recall came, so the names there were invalidated
// only after the rename returned (the kernel holds the directory's lock
// until then), and a chmod issued before that invalidation ran reached the
// file through the stale name; the mount named the file by where go-fuse's
// tree had seen it last (its new name), and the server changed it (linz,
// cause 4: SETATTR n2469 -> OK, then LOOKUP a "x" -> ENOENT). The test
// holds the deferred invalidation until the chmod is done, as the
// scheduler did for 25 ms in the run that found it.
func TestChmodThroughStaleDentry(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	for _, d := range []string{a + "/a", a + "/b", b + "/c"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/b/y", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a + "/a/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat a/x before: %v, want ENOENT", err)
	}
	renamed, resume, names := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	hookRenamed := func() {
		once.Do(func() {
			close(renamed)
			<-resume
		})
	}
	hookNames := func() { <-names }
	ma.fsys.hooks.renamed.Store(&hookRenamed)
	ma.fsys.hooks.deferredNames.Store(&hookNames)
	var resumeOnce, namesOnce sync.Once
	defer resumeOnce.Do(func() { close(resume) })
	defer namesOnce.Do(func() { close(names) })

	errc := make(chan error, 1)
	go func() { errc <- os.Rename(a+"/b/y", a+"/a/x") }()
	select {
	case <-renamed:
	case err := <-errc:
		t.Fatalf("rename on mount a returned before its hook: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("rename on mount a: not committed after a minute")
	}
	// The other mount moves the file away while mount a's rename has not
	// returned: its recall of a's lease is answered at once, the names
	// there wait for the rename.
	if err := os.Rename(b+"/a/x", b+"/c/z"); err != nil {
		t.Fatalf("rename on mount b: %v", err)
	}
	resumeOnce.Do(func() { close(resume) })
	if err := <-errc; err != nil {
		t.Fatalf("rename on mount a: %v", err)
	}
	// Mount a learns the file's new name: go-fuse's tree has it there now.
	if _, err := os.Stat(a + "/c/z"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a+"/a/x", 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("chmod a/x after mount b renamed it away: %v, want ENOENT", err)
	}
	namesOnce.Do(func() { close(names) })
	st, err := os.Stat(b + "/c/z")
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o644 {
		t.Errorf("c/z has mode %o after a chmod of another name; want 644", m)
	}
}

// TestStatOfOpenFileReplacedElsewhere: a getattr by path of a file open
// here that another mount has since replaced answers ESTALE (the kernel
// looks the name up again), not what this mount's open state last knew.
// The kernel had looked b/z up (the file, size 4, after another mount's
// write and close), a recall then made it forget the attributes, and the
// GETATTR that followed found the file gone (another mount renamed a file
// over it): the mount answered with its open state's size, 0 from the
// open before the write, and stat(b/z) returned the old file with the old
// size (linz: stat(b/z) -> ino 1329 size 0, after mount 2's write+close
// and stat -> size 4). The test calls the handler as the kernel did: the
// window between a path walk and its GETATTR is the kernel's.
func TestStatOfOpenFileReplacedElsewhere(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/z", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/z")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(b+"/z", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a + "/z")
	if err != nil || st.Size() != 4 {
		t.Fatalf("stat z after the other mount's write: %v, %v; want size 4", st, err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if err := os.WriteFile(b+"/w", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/w", b+"/z"); err != nil {
		t.Fatal(err)
	}
	nodes := ma.fsys.index.get(core.Ino(ino))
	if len(nodes) == 0 {
		t.Fatal("mount a has no node for the file")
	}
	node := nodes[len(nodes)-1]
	// The kernel's request, from a thread of the caller.
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4242}, Cancel: make(chan struct{})}
	var out fuse.AttrOut
	errno := node.Getattr(ctx, nil, &out)
	if errno != syscall.ESTALE {
		t.Errorf("getattr by path of the replaced file: errno %v, ino %d size %d; want ESTALE", errno, out.Ino, out.Size)
	}
	// The kernel retries once, after looking the name up again: if that
	// lookup (here: what the Lookup handler notes of it) found the file
	// and it is gone again by the retried GETATTR, what the lookup said
	// answers (a second ESTALE would reach the caller).
	ma.fsys.retries.lookedUp(ctx, core.RootIno, "z", node)
	errno = node.Getattr(ctx, nil, &out)
	if errno != 0 || out.Size != 4 {
		t.Errorf("getattr by path after the kernel looked the file up again: errno %v, size %d; want 0 and the lookup's size 4", errno, out.Size)
	}
	// Not for another thread.
	other := &fuse.Context{Caller: fuse.Caller{Pid: 4245}, Cancel: make(chan struct{})}
	if errno := node.Getattr(other, nil, &out); errno != syscall.ESTALE {
		t.Errorf("a getattr by path from another thread: errno %v, want ESTALE", errno)
	}
	// Through the descriptor the file is still there, with what this
	// mount knows of it. (A handle that writes: a reader's would read the
	// growth to store in the kernel's pages, growth.go.)
	if errno := nodes[len(nodes)-1].Getattr(context.Background(), &handle{write: true}, &out); errno != 0 || out.Nlink != 0 {
		t.Errorf("getattr through the descriptor: errno %v, nlink %d; want 0 and nlink 0", errno, out.Nlink)
	}
}

// TestRereadWhileGetattrOvertaken: a reread of a file another mount grew
// and closed sees the new content even when an invalidation of the file's
// attributes overtakes the GETATTR the reread made. The kernel drops a
// GETATTR reply older than the node's last invalidation, and a read past
// its cached end of file then ends at the old size without asking again;
// a recall of the file's directory for another name there invalidates it
// (linz, cause 3: reread -> "" 5 ms after the other mount's write+close
// returned; the mount's log showed the GETATTR answered with the new size
// and the invalidation logged just before the mount read the request).
// The test holds the GETATTR after the server answered and invalidates
// the node then, as the recall did.
func TestRereadWhileGetattrOvertaken(t *testing.T) { testRereadOvertaken(t, false) }

// TestRecallOfOpenFileWhoseNameWasReused: a recall of a directory drops
// the pages of a file open here through it even when go-fuse's tree still
// links the file to a name in that directory that now holds another file.
// go-fuse does not unlink a node from its parent when a new node takes its
// name, so the recall took the open file for a child of the directory,
// which the directory's own invalidation covers, while that invalidation
// went to the name's new file: a reread after another mount's write and
// close of the same length returned the old content, with no request
// (linz: reread(ino 1092) -> "C302" 9 ms after "C303" was written and
// closed).
func TestRecallOfOpenFileWhoseNameWasReused(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(a+"/z", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/z")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reread := rereader(t, held)
	reread("v1")
	if err := os.Rename(b+"/z", b+"/x"); err != nil {
		t.Fatal(err)
	}
	// Mount a reuses the name: go-fuse's tree now has the new file under
	// z, and still the open one's link to z.
	if err := os.WriteFile(a+"/z", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("v1")
	if err := os.WriteFile(b+"/x", []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("v2")
}

// TestChmodRetryOfReplacedName: the kernel's retry of a chmod that the
// mount answered ESTALE, through a lookup that found the name holding the
// file, changes what the name holds if it changed again before the retried
// SETATTR, instead of a second ESTALE reaching the caller (linz: chmod(a/x)
// -> "stale file handle" when a/x was renamed over twice during the call).
func TestChmodRetryOfReplacedName(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	nodes := ma.fsys.index.get(core.Ino(st.Sys().(*syscall.Stat_t).Ino))
	if len(nodes) == 0 {
		t.Fatal("mount a has no node for the file")
	}
	node := nodes[len(nodes)-1]
	if err := os.WriteFile(b+"/g", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/g", b+"/f"); err != nil {
		t.Fatal(err)
	}
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4243}, Cancel: make(chan struct{})}
	in := &fuse.SetAttrIn{}
	in.Valid = fuse.FATTR_MODE
	in.Mode = 0o600
	var out fuse.AttrOut
	if errno := node.Setattr(ctx, nil, in, &out); errno != syscall.ESTALE {
		t.Fatalf("chmod of a name that holds another file now: errno %v, want ESTALE", errno)
	}
	// The retry's lookup found the name holding the node (it changed
	// again after that): the retried chmod changes what the name holds.
	ma.fsys.retries.lookedUp(ctx, core.RootIno, "f", node)
	if errno := node.Setattr(ctx, nil, in, &out); errno != 0 {
		t.Fatalf("the kernel's retried chmod: errno %v, want 0", errno)
	}
	if st, err := os.Stat(b + "/f"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the file the name holds: %v, %v; want mode 600", st.Mode(), err)
	}
	if st, err := os.Stat(a + "/f"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the file the name holds, seen by the mount that changed it: %v, %v; want mode 600", st.Mode(), err)
	}
}

// TestOpenRetryOfMovedFile: the kernel's retry of an open that the mount
// answered ESTALE, through a lookup that found the name holding the file,
// opens that file wherever another mount moved it since, instead of a
// second ESTALE (the name holds another file by the retried OPEN) or
// ENOENT (the name is gone) reaching the caller: the file the lookup
// found, within the call, is the one a local open opens (linz run 12 of
// the third session: open(b/x) -> "stale file handle"). Only a file gone
// by then fails: ENOENT if its name is gone, ESTALE if the name holds
// another file (it held a file throughout, so ENOENT would be wrong: make
// linz found open(b/z) -> ENOENT while another mount renamed over b/z).
func TestOpenRetryOfMovedFile(t *testing.T) {
	requireFUSE(t)
	for _, replaced := range []bool{true, false} {
		t.Run(map[bool]string{true: "name replaced", false: "name gone"}[replaced], func(t *testing.T) {
			openRetryOfMovedFile(t, replaced)
		})
	}
}

func openRetryOfMovedFile(t *testing.T, replaced bool) {
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	ino := core.Ino(st.Sys().(*syscall.Stat_t).Ino)
	nodes := ma.fsys.index.get(ino)
	if len(nodes) == 0 {
		t.Fatal("mount a has no node for the file")
	}
	node := nodes[len(nodes)-1]
	if err := os.Rename(b+"/f", b+"/moved"); err != nil {
		t.Fatal(err)
	}
	if replaced {
		if err := os.WriteFile(b+"/f", []byte("other"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4244}, Cancel: make(chan struct{})}
	if _, _, errno := node.Open(ctx, syscall.O_RDONLY); errno != syscall.ESTALE {
		t.Fatalf("open of a node its name no longer holds: errno %v, want ESTALE", errno)
	}
	// The retry's lookup found the name holding the node (it changed
	// again after that): the retried open opens the file it found.
	ma.fsys.retries.lookedUp(ctx, core.RootIno, "f", node)
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("the kernel's retried open: errno %v, want 0", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	buf := make([]byte, 16)
	n, err := h.f.ReadAt(buf, 0)
	if h.f.Ino() != ino || string(buf[:n]) != "v1" || err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("the retried open: ino %d content %q, %v; want ino %d content \"v1\"", h.f.Ino(), buf[:n], err, ino)
	}
	// A file removed by then: ENOENT where the name is gone; ESTALE
	// where it holds another file.
	if err := os.Remove(b + "/moved"); err != nil {
		t.Fatal(err)
	}
	want := syscall.ENOENT
	if replaced {
		want = syscall.ESTALE
	}
	if _, _, errno := node.Open(ctx, syscall.O_RDONLY); errno != syscall.ESTALE {
		t.Fatalf("open of a node its name no longer holds: errno %v, want ESTALE", errno)
	}
	ma.fsys.retries.lookedUp(ctx, core.RootIno, "f", node)
	if _, _, errno := node.Open(ctx, syscall.O_RDONLY); errno != want {
		t.Errorf("the retried open of a file removed since: errno %v, want %v", errno, want)
	}
}

// TestRetryEndsWithItsCall: what the mount remembers of a thread's retry
// after ESTALE (retry.go) serves the retried request only, not the
// thread's later calls that reach the node through the kernel's cached
// dentry. It stayed until the thread's next lookup or ESTALE, so a later
// stat was answered with the attributes the node had when the retry's
// lookup found it (make linz: stat(b/x) -> mode 640 after another mount's
// chmod to 644 returned), and a later chmod went to the name the retry
// had looked up (chmod(b/x) -> ENOENT right after this mount's own rename
// to b/x, the retry's name a/z being gone).
func TestRetryEndsWithItsCall(t *testing.T) {
	requireFUSE(t)
	for _, op := range []string{"getattr", "setattr"} {
		t.Run(op, func(t *testing.T) { retryEndsWithItsCall(t, op) })
	}
}

func retryEndsWithItsCall(t *testing.T, op string) {
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	nodes := ma.fsys.index.get(core.Ino(st.Sys().(*syscall.Stat_t).Ino))
	if len(nodes) == 0 {
		t.Fatal("mount a has no node for the file")
	}
	node := nodes[len(nodes)-1]
	if err := os.WriteFile(b+"/g", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/g", b+"/f"); err != nil {
		t.Fatal(err)
	}
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4245}, Cancel: make(chan struct{})}
	call := func() syscall.Errno {
		if op == "getattr" {
			var out fuse.AttrOut
			return node.Getattr(ctx, nil, &out)
		}
		in := &fuse.SetAttrIn{}
		in.Valid, in.Mode = fuse.FATTR_MODE, 0o600
		var out fuse.AttrOut
		return node.Setattr(ctx, nil, in, &out)
	}
	if errno := call(); errno != syscall.ESTALE {
		t.Fatalf("%s of a name that holds another file now: errno %v, want ESTALE", op, errno)
	}
	ma.fsys.retries.lookedUp(ctx, core.RootIno, "f", node)
	if errno := call(); errno != 0 {
		t.Fatalf("the kernel's retried %s: errno %v, want 0", op, errno)
	}
	// A later call of the same thread, through the cached dentry: the
	// name holds a third file now.
	if err := os.Rename(b+"/f", b+"/h"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/f", []byte("third"), 0o644); err != nil {
		t.Fatal(err)
	}
	if errno := call(); errno != syscall.ESTALE {
		t.Errorf("a later %s of the node, no retry: errno %v, want ESTALE", op, errno)
	}
	if st, err := os.Stat(b + "/f"); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("the third file: %v, %v; want mode 644 (no chmod reached it)", st.Mode(), err)
	}
}

// TestRereadOfOpenFileWhoseNameThisMountReused: a file open on one mount,
// renamed away by another mount, and whose old name this mount then reuses
// with a rename of its own, is still the open file: a reread through the
// descriptor sees what the other mount wrote there and closed. go-fuse
// unlinks the open file's node from its old name when this mount's rename
// replaces it, so the node had no parent; the mount then named it by inode
// alone, which finds no one-link file, answered the GETATTR with the open
// state's size from before the write (nlink 0, as for a removed file), and
// let the kernel keep that for a lease's term (linz, make linz run 1 of
// the eleventh session: reread -> "" after another mount's write "C231"
// and close returned).
func TestRereadOfOpenFileWhoseNameThisMountReused(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	for _, d := range []string{"/d1", "/d2"} {
		if err := os.Mkdir(a+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/d1/x", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/d1/x")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reread := rereader(t, held)
	reread("")
	if err := os.Rename(b+"/d1/x", b+"/d2/x"); err != nil {
		t.Fatal(err)
	}
	// Mount a reuses the name: its rename replaces, in go-fuse's tree,
	// the open file's old link.
	if err := os.WriteFile(a+"/d1/z", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a+"/d1/z", a+"/d1/x"); err != nil {
		t.Fatal(err)
	}
	reread("")
	if err := os.WriteFile(b+"/d2/x", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("data")
	if err := os.WriteFile(b+"/d2/x", []byte("more"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("more")
}

// TestLookupOfFileKnownByAnotherName: a lookup that finds a file the
// kernel already knows by another name (open here, renamed by another
// mount) notes what it found on the node the kernel keeps. newChild made a
// new node, which go-fuse drops for the one it has, so the lookup's
// attributes and the retry's walk (retry.go) went to the dropped node: the
// kernel's retried GETATTR of the node it kept was not taken for the retry,
// and a second ESTALE reached the caller when the name changed again
// within the call (linz, "ESTALE reached a caller" in make linz runs; the
// FUSE log of run 3 of the eleventh session showed LOOKUP a "x" answered
// with the node id of b/z's open file). The test makes the kernel's
// requests by calling the handlers, as TestChmodRetryOfReplacedName does.
func TestLookupOfFileKnownByAnotherName(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	for _, d := range []string{"/d1", "/d2"} {
		if err := os.Mkdir(a+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/d1/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/d1/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	nodeOf := func(path string) *Node {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ma.fsys.index.get(core.Ino(st.Sys().(*syscall.Stat_t).Ino)) {
			//lint:ignore SA1019 go-fuse's own record of a forgotten node, as lease.go reads it
			if !n.Forgotten() {
				return n
			}
		}
		t.Fatalf("mount a has no live node for %s", path)
		return nil
	}
	kept, d2 := nodeOf(a+"/d1/f"), nodeOf(a+"/d2")
	if err := os.Rename(b+"/d1/f", b+"/d2/g"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/d2/g", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel's retry of a stat of d2/g answered ESTALE: its lookup
	// finds the file, then another mount replaces the name before the
	// retried GETATTR.
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4246}, Cancel: make(chan struct{})}
	ma.fsys.retries.estale(ctx, "getattr")
	var entry fuse.EntryOut
	if _, errno := d2.Lookup(ctx, "g", &entry); errno != 0 || entry.Size != 4 {
		t.Fatalf("lookup of d2/g: errno %v, size %d; want the file, size 4", errno, entry.Size)
	}
	if err := os.WriteFile(b+"/d2/w", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/d2/w", b+"/d2/g"); err != nil {
		t.Fatal(err)
	}
	var out fuse.AttrOut
	if errno := kept.Getattr(ctx, nil, &out); errno != 0 || out.Size != 4 {
		t.Errorf("the retried getattr of the node the kernel kept: errno %v, size %d; want what the lookup said, size 4", errno, out.Size)
	}
}

// TestOpenRetryHoldsTheName: the kernel's retry of an open that the mount
// answered ESTALE opens the file its lookup found even when another mount
// replaces the name right after that lookup. The retried OPEN then found
// the file gone and the name holding another one, and a second ESTALE
// reached the caller (make linz run 3 of the eleventh session: open(a/x) ->
// "stale file handle" on two mounts; the FUSE log: OPEN ESTALE, the
// retry's LOOKUP a "x" found a new file, OPEN of it ESTALE). A recall of
// the directory now waits, bounded, for a retried open whose lookup went
// through it, so that the retry's lookup and open are one step for the
// other mounts, as a local open's walk pins the inode it found. The test
// makes the kernel's requests by calling the handlers.
//
// The ESTALE the kernel retries may also be the answer to the open's
// permission check, a GETATTR (with default_permissions, when the
// attributes timed out): the recall held only walks whose ESTALE was an
// OPEN's, and a second ESTALE reached open(2) (make linz, thirteenth
// session, run 8: GETATTR ESTALE, the retry's LOOKUP a "y" under a lease,
// the recall of a released at once, OPEN ESTALE).
//
// And the recall may come while the retry's lookup is in flight, after the
// server answered it and before the walk noted the node it found: the
// recall was released at once (make linz, thirteenth session, run 11:
// LOOKUP b "z" granted a lease that was recalled as the reply went out,
// OPEN ESTALE).
func TestOpenRetryHoldsTheName(t *testing.T) {
	for _, tc := range []struct {
		name, first  string
		duringLookup bool
	}{
		{"open", "open", false},
		{"getattr", "getattr", false},
		{"during-lookup", "open", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testOpenRetryHoldsTheName(t, tc.first, tc.duringLookup) })
	}
}

func testOpenRetryHoldsTheName(t *testing.T, first string, duringLookup bool) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a+"/w", []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	var heldOnce sync.Once
	hookHeld := func() { heldOnce.Do(func() { close(held) }) }
	ma.fsys.hooks.heldRecall.Store(&hookHeld)
	// A walk holds recalls for a while after its lookup (getattrWalkHold,
	// retryOpenHold): long enough here for the other mount's rename to
	// start.
	ma.fsys.retries.mu.Lock()
	ma.fsys.retries.getattrHold, ma.fsys.retries.openHold = time.Minute, time.Minute
	ma.fsys.retries.mu.Unlock()
	// The mount answered the thread's OPEN (or the GETATTR of its
	// permission check) ESTALE; the kernel looks the name up again.
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4247}, Cancel: make(chan struct{})}
	ma.fsys.retries.estale(ctx, first)
	// Another mount replaces the name before the retried OPEN: after the
	// retry's lookup, or while it is in flight, once the server answered.
	errc := make(chan error, 1)
	var replaced error
	replace := func() {
		go func() { errc <- os.Rename(b+"/w", b+"/f") }()
		select {
		case <-held:
		case err := <-errc:
			errc <- err
		case <-time.After(time.Minute):
			replaced = errors.New("the rename on mount b neither returned nor recalled within a minute")
		}
	}
	if duringLookup {
		var once sync.Once
		hook := func() { once.Do(replace) }
		ma.fsys.hooks.lookupAnswered.Store(&hook)
	}
	var entry fuse.EntryOut
	ch, errno := ma.fsys.index.root.Lookup(ctx, "f", &entry)
	if errno != 0 {
		t.Fatalf("the retry's lookup of f: errno %v", errno)
	}
	node := ch.Operations().(*Node)
	if !duringLookup {
		replace()
	}
	if replaced != nil {
		t.Fatal(replaced)
	}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("the kernel's retried open, the name replaced after its lookup: errno %v, want 0", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	if err := <-errc; err != nil {
		t.Fatalf("rename on mount b: %v", err)
	}
	buf := make([]byte, 16)
	n, err := h.f.ReadAt(buf, 0)
	if h.f.Ino() != node.ino() || string(buf[:n]) != "v1" || err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("the retried open: ino %d content %q, %v; want ino %d content \"v1\"", h.f.Ino(), buf[:n], err, node.ino())
	}
}

// TestStatOfOpenFileRemovedElsewhere: a GETATTR of a file open here that
// another mount has removed answers with the newest attributes the servers
// gave this mount (a lookup's, a getattr's) and this mount's own writes,
// not with the size the open state read at its open. The kernel names no
// handle in a GETATTR by path nor in one of fstat (go-fuse hands Getattr
// the node's first open handle in both cases), so it is the answer to both.
// It was the open state's size, from before another mount's write: after
// a lookup of the file's new name had said size 4, a stat through that name
// got size 0 from the GETATTR that followed, the name having been replaced
// in between (make linz run 3 of the eleventh session: stat(a/x) -> size 0
// after another mount's write "C343" and close returned).
func TestStatOfOpenFileRemovedElsewhere(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(a+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(b+"/f", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/f", b+"/x"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(a + "/x"); err != nil || st.Size() != 4 {
		t.Fatalf("stat x on mount a: %v, %v; want size 4", st, err)
	}
	if err := os.WriteFile(b+"/w", []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b+"/w", b+"/x"); err != nil {
		t.Fatal(err)
	}
	st, err := held.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); st.Size() != 4 || sys.Nlink != 0 {
		t.Errorf("fstat of the open file removed by mount b: size %d nlink %d; want size 4 (what mount a last learned) and nlink 0", st.Size(), sys.Nlink)
	}
}

// TestLookupsOfOneFileUnderTwoNames: a thread whose lookups find one file
// (with one link) under two names, another mount having moved it between
// them, gets ESTALE for the second, so that the kernel walks both names
// again. A rename looks up its source and its target one after the other,
// and if both hold one inode it returns success without asking the file
// system (a rename of a file onto itself): two mounts' renames of b/z to
// a/z both returned ok (make linz run 7 of the eleventh session: the
// second mount's lookup of b/z, refused its lease while it owed a release,
// read b/z before the first mount's rename landed, and its lookup of a/z,
// under a lease granted after it, found the file there). The test makes
// the kernel's requests by calling the handlers.
func TestLookupsOfOneFileUnderTwoNames(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	for _, d := range []string{"/d1", "/d2"} {
		if err := os.Mkdir(a+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/d1/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dirNode := func(path string) *Node {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		n := ma.fsys.index.live(core.Ino(st.Sys().(*syscall.Stat_t).Ino), core.ModeDir)
		if n == nil {
			t.Fatalf("mount a has no live node for %s", path)
		}
		return n
	}
	d1, d2 := dirNode(a+"/d1"), dirNode(a+"/d2")
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4248}, Cancel: make(chan struct{})}
	var out fuse.EntryOut
	if _, errno := d1.Lookup(ctx, "f", &out); errno != 0 {
		t.Fatalf("lookup d1/f: errno %v", errno)
	}
	ino := out.Ino
	if err := os.Rename(b+"/d1/f", b+"/d2/f"); err != nil {
		t.Fatal(err)
	}
	if _, errno := d2.Lookup(ctx, "f", &out); errno != syscall.ESTALE {
		t.Errorf("lookup d2/f by the thread that found the file as d1/f: errno %v ino %d, want ESTALE", errno, out.Ino)
	}
	// The kernel's walk again, with LOOKUP_REVAL: the new name is the
	// answer now.
	ch, errno := d2.Lookup(ctx, "f", &out)
	if errno != 0 || out.Ino != ino {
		t.Fatalf("the retried lookup of d2/f: errno %v ino %d, want 0 and ino %d", errno, out.Ino, ino)
	}
	// An open's retry goes on with the OPEN of what its walk found, which
	// it opens wherever another mount moved it since (a second ESTALE
	// would reach the caller: make linz run 11).
	if err := os.Rename(b+"/d2/f", b+"/d1/g"); err != nil {
		t.Fatal(err)
	}
	fh, _, errno := ch.Operations().(*Node).Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("the retry's OPEN of the file moved since its lookup: errno %v, want 0", errno)
	}
	fh.(*handle).Release(ctx)
	if _, errno := d1.Lookup(ctx, "f", &out); errno != syscall.ENOENT {
		t.Errorf("a lookup of d1/f: errno %v, want ENOENT", errno)
	}
	// A rename's retry: its lookup of the target finds nothing, and the
	// rename is not a request about the node. What the mount remembers
	// of the retry ends there: it answered this thread's next stat of the
	// node by the name the retry had found it under, gone by then (make
	// linz run 18: stat(b/x) -> ENOENT right after the thread's own
	// rename to b/x returned).
	if _, errno := d1.Lookup(ctx, "g", &out); errno != 0 {
		t.Fatalf("lookup d1/g: errno %v", errno)
	}
	if err := os.Rename(b+"/d1/g", b+"/d1/f"); err != nil {
		t.Fatal(err)
	}
	if _, errno := d1.Lookup(ctx, "f", &out); errno != syscall.ESTALE {
		t.Fatalf("lookup d1/f by the thread that found the file as d1/g: errno %v, want ESTALE", errno)
	}
	if _, errno := d1.Lookup(ctx, "f", &out); errno != 0 {
		t.Fatalf("the retried lookup of d1/f: errno %v", errno)
	}
	if _, errno := d2.Lookup(ctx, "h", &out); errno != syscall.ENOENT {
		t.Fatalf("lookup of the rename's target d2/h: errno %v, want ENOENT", errno)
	}
	if ma.fsys.retries.pending(ctx) {
		t.Errorf("the retry walk outlived a lookup that found nothing after it had found its node")
	}
}

// TestOpenRetryAfterItsPermissionCheck: an open whose first request, the
// GETATTR of the kernel's permission check, the mount answered ESTALE is
// retried by the kernel as a GETATTR and then the OPEN; the OPEN is part
// of the retry too. The retry ended with its GETATTR (a request of the kind
// answered ESTALE), so an OPEN that found the file moved since the retry's
// lookup got a second ESTALE, which reached the caller (make linz run 7 of
// the eleventh session: open(a/y) -> "stale file handle"; the FUSE log:
// GETATTR ESTALE, LOOKUP a "y", GETATTR OK, OPEN ESTALE). A later call of
// the thread through its cached dentry is still no retry.
func TestOpenRetryAfterItsPermissionCheck(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4249}, Cancel: make(chan struct{})}
	ma.fsys.retries.estale(ctx, "getattr")
	var entry fuse.EntryOut
	ch, errno := ma.fsys.index.root.Lookup(ctx, "f", &entry)
	if errno != 0 {
		t.Fatalf("the retry's lookup of f: errno %v", errno)
	}
	node := ch.Operations().(*Node)
	var out fuse.AttrOut
	if errno := node.Getattr(ctx, nil, &out); errno != 0 {
		t.Fatalf("the retry's GETATTR: errno %v", errno)
	}
	if err := os.Rename(b+"/f", b+"/moved"); err != nil {
		t.Fatal(err)
	}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("the retry's OPEN of the file moved since its lookup: errno %v, want 0", errno)
	}
	fh.(*handle).Release(ctx)
	// A later open of the node, through a dentry the kernel kept: no
	// retry (the name holds nothing now).
	if _, _, errno := node.Open(ctx, syscall.O_RDONLY); errno != syscall.ESTALE {
		t.Errorf("a later open of the node, no retry: errno %v, want ESTALE", errno)
	}
}

// TestRetryWalkLooksUpTheNameTwice: the kernel's walk after ESTALE
// (LOOKUP_REVAL) may look the last name up twice, revalidating the dentry
// its first lookup made, and find another file the second time (another
// mount replaced the name in between). That is still the retry's walk; the
// mount took the second lookup for a later call's and ended the retry, and
// the retried chmod got a second ESTALE, which reached the caller (make
// linz run 19 of the eleventh session: chmod(b/x) -> "stale file handle";
// the log: SETATTR ESTALE, LOOKUP b "x" twice, two inodes, SETATTR ESTALE).
func TestRetryWalkLooksUpTheNameTwice(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	replace := func(content string) {
		t.Helper()
		if err := os.WriteFile(b+"/w", []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(b+"/w", b+"/f"); err != nil {
			t.Fatal(err)
		}
	}
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4250}, Cancel: make(chan struct{})}
	ma.fsys.retries.estale(ctx, "setattr")
	root := ma.fsys.index.root
	var entry fuse.EntryOut
	if _, errno := root.Lookup(ctx, "f", &entry); errno != 0 {
		t.Fatalf("the retry's lookup of f: errno %v", errno)
	}
	replace("v2")
	ch, errno := root.Lookup(ctx, "f", &entry)
	if errno != 0 {
		t.Fatalf("the retry's second lookup of f: errno %v", errno)
	}
	replace("v3")
	in := &fuse.SetAttrIn{}
	in.Valid, in.Mode = fuse.FATTR_MODE, 0o600
	var out fuse.AttrOut
	if errno := ch.Operations().(*Node).Setattr(ctx, nil, in, &out); errno != 0 {
		t.Errorf("the retried chmod, the name replaced after the walk's second lookup: errno %v, want 0", errno)
	}
}

// rereader reads f from its start through the same descriptor, as linz's
// rereads do, and reports content other than want.
func rereader(t *testing.T, f *os.File) func(want string) {
	return func(want string) {
		t.Helper()
		buf := make([]byte, 16)
		n, err := f.ReadAt(buf, 0)
		if err != nil && n == 0 && want != "" {
			t.Fatalf("reread: %v", err)
		}
		if got := string(buf[:n]); got != want {
			t.Errorf("reread through the descriptor: %q, want %q", got, want)
		}
	}
}

// TestReadOfViewNoLeaseCovered: a READ whose bytes came from a view of the
// file that no lease covered drops its pages after the reply, even if the
// open state is fresh again by then. The read's first step refreshed the
// open state while the mount owed the release of the lease a writer's
// commit recalled (the server refused the lease: the old content, legal
// then), and a second step, at the end of the file, refreshed it again
// under a lease granted once the commit had landed: the mount saw the
// state fresh, kept the old bytes in the kernel's pages, and no recall
// would drop them (make linz run 1 of the twelfth session: reread ->
// "C022" from the pages 1.7 ms after another mount's write "B027" and
// close returned; the eleventh session's run 5). A read now reports the
// views its steps took (client.File.ReadAtLeased) and ends at the end of
// file of the view its bytes came from.
func TestReadOfViewNoLeaseCovered(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	mr := mount(t, tc.client(t), Options{})
	r := mr.Dir()
	w := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(w+"/f", []byte("old1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(r + "/f")
	if err != nil {
		t.Fatal(err)
	}
	nodes := mr.fsys.index.get(core.Ino(st.Sys().(*syscall.Stat_t).Ino))
	if len(nodes) == 0 {
		t.Fatal("the reading mount has no node for the file")
	}
	node := nodes[len(nodes)-1]
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4253}, Cancel: make(chan struct{})}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("open: errno %v", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	type reply struct {
		res   fuse.ReadResult
		errno syscall.Errno
	}
	var (
		firstStep, landed  = make(chan struct{}), make(chan struct{})
		stepOnce, readOnce sync.Once
		got                = make(chan reply, 1)
	)
	mr.fsys.c.SetReadStepHook(func() { stepOnce.Do(func() { close(firstStep); <-landed }) })
	defer mr.fsys.c.SetReadStepHook(nil)
	// The writer's commit recalls the reader's lease; before the reader
	// releases it, a READ takes its first step.
	hookRecalled := func() {
		readOnce.Do(func() {
			go func() {
				res, errno := h.Read(ctx, make([]byte, 4096), 0)
				got <- reply{res, errno}
			}()
			<-firstStep
		})
	}
	mr.fsys.hooks.recalled.Store(&hookRecalled)
	wf, err := os.OpenFile(w+"/f", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wf.WriteAt([]byte("new2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	close(landed)
	rep := <-got
	if rep.errno != 0 {
		t.Fatalf("read: errno %v", rep.errno)
	}
	data, _ := rep.res.Bytes(make([]byte, 4096))
	if _, dropped := rep.res.(*dropAfterReply); !dropped {
		t.Errorf("a read that returned %q, read without a lease before the writer's close returned, leaves its pages in the kernel's cache: a reread would return them", data)
	}
}

// TestRecallDuringOwnRenameOfOpenFile: a recall of the directory that this
// mount's rename in flight moves an open file into marks the file's open
// state stale. Until the rename returns, the client addresses the file by
// its old name and go-fuse's tree has it there, so the recall found
// neither; another mount's commit of the file under its new name (which
// recalled that directory) was missed, and the next reread returned the old
// content (make linz run 2 of the twelfth session: reread -> "" 4.4 ms
// after another mount's write "A127" and close returned; the reading mount
// had renamed the file b/x to a/x meanwhile). The test stands the rename
// in flight as Rename does (moveInto) and delivers the recall the way the
// client does (recalled): the window is between the server's reply to the
// rename and the client's re-pointing of its open state.
func TestRecallDuringOwnRenameOfOpenFile(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	ma := mount(t, tc.client(t), Options{})
	a := ma.Dir()
	if err := os.Mkdir(a+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a+"/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	ino := func(name string) core.Ino {
		t.Helper()
		st, err := os.Stat(a + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Ino(st.Sys().(*syscall.Stat_t).Ino)
	}
	nodes := ma.fsys.index.get(ino("f"))
	if len(nodes) == 0 {
		t.Fatal("the mount has no node for the file")
	}
	node := nodes[len(nodes)-1]
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4254}, Cancel: make(chan struct{})}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("open: errno %v", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	if _, errno := h.Read(ctx, make([]byte, 16), 0); errno != 0 {
		t.Fatalf("read: errno %v", errno)
	}
	if h.f.Stale() {
		t.Fatal("the open state is stale before the recall")
	}
	d := ino("d")
	done := ma.fsys.index.moveInto(d, node)
	ma.fsys.recalled([]client.LeaseKey{{Ino: d}})
	done()
	if !h.f.Stale() {
		t.Error("a recall of the directory this mount's rename in flight moves the open file into left its open state fresh: the next read would not ask the server")
	}
}

// TestRereadAfterOvertakenLookup: a reread of a file another mount grew
// and closed sees the new content when the kernel dropped both the reply
// that told it the new size (a LOOKUP's) and the reread's own GETATTR
// (overtaken by invalidations). The mount took the size of the dropped
// reply for the kernel's, so the reread's GETATTR stored no growth past
// it, and the read ended at the old size (make linz run 9 of the twelfth
// session: reread -> "" 0.06 ms after another mount's write "A237" and
// close returned; the log: a LOOKUP and a stat's GETATTR with the new size,
// each followed by an invalidation of the file, then the reread's GETATTR,
// also overtaken, and no READ). The test answers a LOOKUP the kernel never
// sees, as a dropped reply, and invalidates the node during the reread's
// GETATTR, as the recall did (TestRereadWhileGetattrOvertaken is the same
// without the LOOKUP).
func TestRereadAfterOvertakenLookup(t *testing.T) { testRereadOvertaken(t, true) }

// testRereadOvertaken is the two tests above: a reread through a held
// descriptor of a file another mount grew and closed, with the node
// invalidated during the reread's GETATTR; lookupFirst: after a LOOKUP
// whose reply the kernel never sees (a dropped reply).
func testRereadOvertaken(t *testing.T, lookupFirst bool) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	if err := os.WriteFile(a+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	st, err := held.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ino := core.Ino(st.Sys().(*syscall.Stat_t).Ino)
	// The other mount's write and close recall mount a's lease: the
	// kernel forgets the file's attributes.
	if err := os.WriteFile(b+"/f", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if lookupFirst {
		ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4255}, Cancel: make(chan struct{})}
		var entry fuse.EntryOut
		if _, errno := ma.fsys.index.root.Lookup(ctx, "f", &entry); errno != 0 || entry.Size != 4 {
			t.Fatalf("lookup of f: errno %v size %d, want 0 and 4", errno, entry.Size)
		}
	}
	nodes := ma.fsys.index.get(ino)
	if len(nodes) == 0 {
		t.Fatal("mount a has no node for the file")
	}
	var once sync.Once
	hook := func() {
		once.Do(func() {
			for _, n := range nodes {
				_ = n.notifyContent(-1, 0)
			}
		})
	}
	ma.fsys.hooks.getattr.Store(&hook)
	buf := make([]byte, 16)
	n, _ := held.ReadAt(buf, 0)
	if got := string(buf[:n]); got != "data" {
		t.Errorf("reread through the descriptor: %q, want \"data\"", got)
	}
}

// TestReadAfterLeaseRanOut: a read through a descriptor whose open state
// was read under a lease that has since run out, with no recall, asks the
// server again. Nobody changed the file while the lease lasted, so nothing
// recalled it; a change after that lands with no recall, and the read
// answered from the open state (make linz run 18 of the twelfth session:
// reread -> "" 8.7 ms after another mount's write "C254" and close
// returned; the reading mount had opened the file 2 s before, across a
// stall of every mount, and its GETATTR of the reread took a new lease and
// said size 4 while the READ answered 0 bytes).
func TestReadAfterLeaseRanOut(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	mr := mount(t, tc.client(t), Options{})
	r := mr.Dir()
	w := mount(t, tc.client(t), Options{}).Dir()
	if err := os.WriteFile(w+"/f", []byte("old1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(r + "/f")
	if err != nil {
		t.Fatal(err)
	}
	nodes := mr.fsys.index.get(core.Ino(st.Sys().(*syscall.Stat_t).Ino))
	if len(nodes) == 0 {
		t.Fatal("the reading mount has no node for the file")
	}
	node := nodes[len(nodes)-1]
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4256}, Cancel: make(chan struct{})}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("open: errno %v", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	if h.f.Stale() {
		t.Fatal("the open was not covered by a lease")
	}
	// The lease's term (config.DefaultLeaseTerm) runs out; nothing
	// recalls it. The open state must count as stale from then on.
	waitfor.Until(t, 2*config.DefaultLeaseTerm, "the open state to be stale once its lease ran out", h.f.Stale)
	wf, err := os.OpenFile(w+"/f", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wf.WriteAt([]byte("new2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	res, errno := h.Read(ctx, make([]byte, 16), 0)
	if errno != 0 {
		t.Fatalf("read: errno %v", errno)
	}
	data, _ := res.Bytes(make([]byte, 16))
	if string(data) != "new2" {
		t.Errorf("read through the descriptor after another mount's write and close: %q, want \"new2\"", data)
	}
}

// TestRevalidationOfNameThatMovedHere: when a thread's lookup finds under
// x the file its previous lookup found under z, and the kernel held a
// dentry x for another file (the lookup revalidates it), the ESTALE it is
// answered does not reach the call: the kernel drops the dentry and looks
// x up afresh. That lookup is answered ESTALE too, once, so that the call
// fails with ESTALE and the kernel's retry walks the path again. It found
// the file, and a rename of z to x, z's dentry still from its own lookup,
// saw one inode under both names and returned success without a RENAME,
// another mount having renamed z to x in between: two renames of one file
// both returned ok (make linz run 29 of the twelfth session). The
// kernel's retry starts with the path's directories, which clear the mark
// (TestLookupsOfOneFileUnderTwoNames has the case without a dentry: one
// ESTALE, then the retry's lookup is answered).
func TestRevalidationOfNameThatMovedHere(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	for name, content := range map[string]string{"z": "moved", "x": "replaced"} {
		if err := os.WriteFile(a+"/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := ma.fsys.index.root
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4257}, Cancel: make(chan struct{})}
	var out fuse.EntryOut
	// The kernel holds a dentry x for the file x holds now (the open
	// keeps it in go-fuse's tree through the other mount's rename; the
	// reading mount held no lease in the run, and nothing recalled it).
	held, err := os.Open(a + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// The rename's lookup of z; its lookup of x revalidates the dentry.
	if _, errno := root.Lookup(ctx, "z", &out); errno != 0 {
		t.Fatalf("lookup z: errno %v", errno)
	}
	ino := out.Ino
	if err := os.Rename(b+"/z", b+"/x"); err != nil {
		t.Fatal(err)
	}
	if _, errno := root.Lookup(ctx, "x", &out); errno != syscall.ESTALE {
		t.Fatalf("the revalidation of x, which now holds the file found as z: errno %v ino %d, want ESTALE", errno, out.Ino)
	}
	if _, errno := root.Lookup(ctx, "x", &out); errno != syscall.ESTALE {
		t.Errorf("the kernel's fresh lookup of x after the revalidation failed: errno %v ino %d, want ESTALE (the rename would see one inode under z and x)", errno, out.Ino)
	}
	// The kernel's retry, from the path's start.
	if _, errno := root.Lookup(ctx, "x", &out); errno != 0 || out.Ino != ino {
		t.Errorf("the retry's lookup of x: errno %v ino %d, want 0 and ino %d", errno, out.Ino, ino)
	}
}

// TestRecallOfOpenFileAfterOwnCloseRepointed: a close on this mount of a
// file another mount renamed must not point the client's open state back
// at the name go-fuse's tree still has for it. The FUSE layer re-pointed
// the open state there before every flush, fsync and release (for a hard
// link whose name this mount removed), over the place the client had
// followed the file to; the recall of the file's real directory then
// found no file open here in it (client.OpenIn), and the pages the kernel
// held stayed (make linz, thirteenth session, run 4: reread(ino 458) ->
// "A125", this mount's own write, from the kernel's pages 2.7 ms after
// another mount's write "C113" and close returned; the recall of the
// file's directory came during this mount's close, after its FLUSH had
// re-pointed the open state to the old name).
func TestRecallOfOpenFileAfterOwnCloseRepointed(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()
	for _, d := range []string{a + "/d1", a + "/d2"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/d1/f", []byte("old1"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(a + "/d1/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reread := rereader(t, held)
	reread("old1")
	// A write descriptor of the same file on mount a.
	w, err := os.OpenFile(a+"/d1/f", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Mount b moves the file; mount a's reread follows it to d2 and reads
	// it again under a lease on d2.
	if err := os.Rename(b+"/d1/f", b+"/d2/f"); err != nil {
		t.Fatal(err)
	}
	reread("old1")
	// Mount a closes the write descriptor: FLUSH and RELEASE.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Mount b changes the file where it is now: the recall of d2 must
	// drop mount a's pages.
	if err := os.WriteFile(b+"/d2/f", []byte("new2"), 0o644); err != nil {
		t.Fatal(err)
	}
	reread("new2")
}

// TestStatAfterOwnRenameWithoutLeaseOnTarget: after this mount renames a
// file into a directory it holds no lease on, a stat of the new name must
// not be served by the kernel's dentry once another mount has moved the
// file away. The kernel moves the source's dentry to the new name with the
// source's entry timeout (the lease on the old directory, up to 1.8 s);
// with no lease on the new directory no recall reaches this mount when the
// name changes there (make linz, thirteenth session, run 12: open(b/z) ->
// the file 3 ms after another mount's rename of b/z to a/z returned; the
// twelfth session's run 35 and the eleventh's run 13: stat). This mount's
// leases on the new directory are refused here, as they were there (the
// mount owed a release); and it finds the file under its newest name
// too, so that go-fuse's tree has a valid name for the node, which a
// request through the stale dentry is served by.
func TestStatAfterOwnRenameWithoutLeaseOnTarget(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	for _, d := range []string{a + "/a", a + "/b"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(a+"/a/y", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Mount a knows a/y under its lease on a.
	if _, err := os.Stat(a + "/a/y"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(b + "/b") // on mount b: mount a takes no lease on b
	if err != nil {
		t.Fatal(err)
	}
	dirB := core.Ino(st.Sys().(*syscall.Stat_t).Ino)
	ma.fsys.c.SetLeaseRefuseHook(func(k client.LeaseKey) bool { return k.Ino == dirB })
	dropped := make(chan struct{}, 1)
	hook := func() {
		select {
		case dropped <- struct{}{}:
		default:
		}
	}
	ma.fsys.hooks.renamedNames.Store(&hook)
	if err := os.Rename(a+"/a/y", a+"/b/z"); err != nil {
		t.Fatal(err)
	}
	// The mount drops the new name once the kernel has moved the dentry;
	// the other mount's rename comes after that. The wait is bounded well
	// below the dentry's timeout (1.8 s), which would end the test's
	// point.
	select {
	case <-dropped:
	case <-time.After(300 * time.Millisecond):
		t.Log("the new name was not dropped within 300 ms")
	}
	if err := os.Rename(b+"/b/z", b+"/a/w"); err != nil {
		t.Fatal(err)
	}
	// Mount a finds the file under its new name: go-fuse's tree has the
	// node there too, and a request about it by path may go there.
	if _, err := os.Stat(a + "/a/w"); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(a + "/b/z"); !errors.Is(err, fs.ErrNotExist) {
		if err == nil {
			f.Close()
		}
		t.Errorf("open b/z on mount a after mount b renamed it away: %v, want ENOENT", err)
	}
	if _, err := os.Stat(a + "/b/z"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat b/z on mount a after mount b renamed it away: %v, want ENOENT", err)
	}
}

// TestOpenRetryWhoseLookupWasRefusedItsLease: the kernel's retry of an
// open whose lookup the server refused a lease (this mount owed the
// release of a lease on another directory that another mount's change
// recalled, and that change, a rename from there into the lookup's
// directory, was in progress) must not fail with a second ESTALE when that
// change replaces the name before the retried OPEN. With no lease on the
// lookup's directory, no recall of it came to hold the change until the
// OPEN, and the OPEN found the file gone and the name holding another one
// (cause 10 of the twelfth session: runs 1 and 2 of the twelfth session,
// 11 and 25 of the eleventh). The lookup now waits, bounded, for this
// mount's recalls to be released, and asks for its lease again: the server
// has it wait for the change, and the lookup finds its result. The test
// holds mount a's recall until the retry's lookup waits.
func TestOpenRetryWhoseLookupWasRefusedItsLease(t *testing.T) {
	requireFUSE(t)
	ma, a, b := twoMounts(t)
	// Made on mount b: mount a takes no lease on d1.
	for _, d := range []string{b + "/d1", b + "/d2"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(b+"/d1/f", []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/d2/w", []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Mount a holds a lease on d2 and knows d1, with no lease on it (the
	// lookup's read of d1's own record would take one).
	if _, err := os.Stat(a + "/d2/w"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(b + "/d1")
	if err != nil {
		t.Fatal(err)
	}
	ino := core.Ino(st.Sys().(*syscall.Stat_t).Ino)
	ma.fsys.c.SetLeaseRefuseHook(func(k client.LeaseKey) bool { return k.Ino == ino })
	var d1Entry fuse.EntryOut
	d1Inode, errno := ma.fsys.index.root.Lookup(&fuse.Context{Cancel: make(chan struct{})}, "d1", &d1Entry)
	ma.fsys.c.SetLeaseRefuseHook(nil)
	if errno != 0 {
		t.Fatalf("lookup of d1 on mount a: errno %v", errno)
	}
	d1 := []*Node{d1Inode.Operations().(*Node)}
	recalled, gate := make(chan struct{}), make(chan struct{})
	var recalledOnce, gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()
	hookRecalled := func() {
		recalledOnce.Do(func() {
			close(recalled)
			<-gate
		})
	}
	ma.fsys.hooks.recalled.Store(&hookRecalled)
	ma.fsys.hooks.retryLeaseWait.Store(&openGate)
	// Mount b moves d2/w over d1/f; its change (of d1 and d2) waits for
	// mount a's release of d2, which waits at the gate.
	errc := make(chan error, 1)
	go func() { errc <- os.Rename(b+"/d2/w", b+"/d1/f") }()
	select {
	case <-recalled:
	case err := <-errc:
		t.Fatalf("rename on mount b returned before mount a's recall: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no recall on mount a within a minute")
	}
	// The mount answered the thread's OPEN ESTALE; the kernel's retry
	// looks d1/f up: the server refuses the lease (mount a owes a
	// release, and a change of d1 is in progress).
	ctx := &fuse.Context{Caller: fuse.Caller{Pid: 4248}, Cancel: make(chan struct{})}
	ma.fsys.retries.estale(ctx, "open")
	var entry fuse.EntryOut
	ch, errno := d1[0].Lookup(ctx, "f", &entry)
	if errno != 0 {
		t.Fatalf("the retry's lookup of d1/f: errno %v", errno)
	}
	node := ch.Operations().(*Node)
	openGate()
	if err := <-errc; err != nil {
		t.Fatalf("rename on mount b: %v", err)
	}
	fh, _, errno := node.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("the kernel's retried open, the name replaced during its lookup: errno %v, want 0", errno)
	}
	h := fh.(*handle)
	defer h.Release(ctx)
	buf := make([]byte, 16)
	n, err := h.f.ReadAt(buf, 0)
	if got := string(buf[:n]); (got != "other" && got != "v1") || err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("the retried open read %q, %v; want the file the lookup found", got, err)
	}
}

// twoMounts mounts one new cluster twice, with default options: the first
// mount and both mount points.
func twoMounts(t *testing.T) (ma *Mount, a, b string) {
	t.Helper()
	tc := startCluster(t)
	ma = mount(t, tc.client(t), Options{})
	return ma, ma.Dir(), mount(t, tc.client(t), Options{}).Dir()
}
