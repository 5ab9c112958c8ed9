package meta

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestReadDir(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	want := map[string]bool{}
	for i := range 25 {
		e.create(rootCreds(), d.Ino, "f"+itoa(i), 0o644)
		want["f"+itoa(i)] = true
	}
	sub := e.mkdir(rootCreds(), d.Ino, "sub", 0o700)
	want["sub"] = true
	f0 := e.mustLookup(d.Ino, "f0")
	must[*weftpb.LinkReply](t)(e.link(rootCreds(), fileRef(d.Ino, "f0", f0.Ino), d.Ino, "hard"))
	want["hard"] = true

	var cookie []byte
	got := map[string]*weftpb.DirEntryMsg{}
	pages := 0
	for {
		r := must[*weftpb.ReadDirReply](t)(e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: alice, Dir: d.Ino, Cookie: cookie, Limit: 4, Plus: true}))
		pages++
		if len(r.Entries) > 4 {
			t.Fatalf("page of %d entries, limit 4", len(r.Entries))
		}
		for _, de := range r.Entries {
			if got[de.Name] != nil {
				t.Fatalf("%s listed twice", de.Name)
			}
			got[de.Name] = de
		}
		if r.Eof {
			break
		}
		cookie = r.Cookie
	}
	if len(got) != len(want) || pages < 7 {
		t.Fatalf("listed %d names in %d pages, want %d", len(got), pages, len(want))
	}
	for n := range want {
		if got[n] == nil {
			t.Fatalf("%s missing", n)
		}
	}
	if de := got["sub"]; de.Ino != sub.Ino || de.Mode != core.ModeDir|0o700 || de.Attr == nil || de.Attr.Nlink != 2 {
		t.Fatalf("sub entry %+v", de)
	}
	if de := got["hard"]; de.Ino != f0.Ino || de.Attr == nil || de.Attr.Nlink != 2 {
		t.Fatalf("hard-linked entry %+v", de)
	}
	// Without plus: type bits only, no attributes.
	r := must[*weftpb.ReadDirReply](t)(e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: alice, Dir: d.Ino}))
	if len(r.Entries) != len(want) || !r.Eof {
		t.Fatalf("default limit: %d entries eof %v", len(r.Entries), r.Eof)
	}
	for _, de := range r.Entries {
		if de.Attr != nil || de.Mode&^core.ModeType != 0 {
			t.Fatalf("entry without plus %+v", de)
		}
	}
	// The order is stable: a cookie from a full listing resumes at its end.
	r2 := must[*weftpb.ReadDirReply](t)(e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: alice, Dir: d.Ino, Cookie: r.Cookie}))
	if len(r2.Entries) != 0 || !r2.Eof {
		t.Fatalf("after the end: %+v", r2)
	}
}

func TestReadDirErrors(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o711)
	f := e.create(rootCreds(), root, "f", 0o644)
	_, err := e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: alice, Dir: d.Ino})
	wantKind(t, err, errs.Permission)
	must[*weftpb.LinkReply](t)(e.link(rootCreds(), fileRef(root, "f", f.Ino), root, "g"))
	_, err = e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: f.Ino})
	wantKind(t, err, errs.NotDir)
	for _, c := range [][]byte{{9}, {cookieVersion}, {cookieVersion, 1, 2}, make([]byte, 400)} {
		_, err = e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: root, Cookie: c})
		wantKind(t, err, errs.Invalid)
	}
	_, err = e.ReadDir(ctx, &weftpb.ReadDirRequest{Dir: root})
	wantKind(t, err, errs.Invalid)
}

// Entries present for a whole listing appear exactly once, however many other
// names are created and removed between pages.
func TestReadDirCookieSurvivesChurn(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Durability = DurabilityAsync })
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	stable := map[string]bool{}
	for i := range 200 {
		n := "stable" + itoa(i)
		e.create(rootCreds(), d.Ino, n, 0o644)
		stable[n] = true
	}
	for i := range 100 {
		e.create(rootCreds(), d.Ino, "churn"+itoa(i), 0o644)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				n := "churn" + itoa((i*7+w)%100)
				if _, err := e.unlink(rootCreds(), d.Ino, n); err != nil && !errs.Is(err, errs.NotExist) {
					t.Errorf("churn unlink: %v", err)
					return
				}
				if _, err := e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: d.Ino, Name: "new" + itoa(w) + "-" + itoa(i), Mode: 0o644}); err != nil {
					t.Errorf("churn create: %v", err)
					return
				}
			}
		}()
	}
	for round := range 5 {
		seen := map[string]int{}
		var cookie []byte
		for {
			r, err := e.ReadDir(ctx, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: d.Ino, Cookie: cookie, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range r.Entries {
				seen[de.Name]++
			}
			if r.Eof {
				break
			}
			cookie = r.Cookie
		}
		for n := range stable {
			if seen[n] != 1 {
				t.Fatalf("round %d: %s seen %d times", round, n, seen[n])
			}
		}
		for n, c := range seen {
			if c != 1 {
				t.Fatalf("round %d: %s seen %d times", round, n, c)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}
