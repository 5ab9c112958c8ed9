package meta

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestOpenCreatesRoot(t *testing.T) {
	e := newEnv(t)
	a := e.getattr(root)
	if a.Mode != core.ModeDir|0o755 || a.Nlink != 2 || a.Uid != 0 || a.Gid != 0 {
		t.Fatalf("root attr %+v", a)
	}
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != 1 || st.NameMax != 255 || st.FilesFree == 0 {
		t.Fatalf("statfs %+v", st)
	}
}

func TestOtherServerHasNoRoot(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ID = 3 })
	_, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: rootCreds(), Node: inoRef(root)})
	wantKind(t, err, errs.Stale)
	e.reopen()
	e.cfg.ID = 4
	e.Server.Close()
	_, err = Open(e.cfg)
	wantKind(t, err, errs.Invalid) // the store belongs to server 3
	e.cfg.ID = 3
	e.open()
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Dir: ""},
		{Dir: "x", ID: -1},
		{Dir: "x", ID: core.MaxServers},
		{Dir: "x", Durability: "maybe"},
		{Dir: "x", InlineLimit: -1},
		{Dir: "x", AsyncInterval: -1},
	} {
		if err := c.Validate(); !errs.Is(err, errs.Invalid) {
			t.Errorf("%+v: got %v, want Invalid", c, err)
		}
	}
	c := Config{Dir: "x"}
	if err := c.Validate(); err != nil || c.Durability != DurabilitySync || c.InlineLimit != 64<<10 || c.Logger == nil {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
}

func TestReopenKeepsNamespaceAndNeverReusesInos(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	f := e.create(rootCreds(), d.Ino, "f", 0o644)
	must[*weftpb.SymlinkReply](t)(e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: d.Ino, Name: "l", Target: "f"}))
	must[*weftpb.Empty](t)(e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: rootCreds(), Node: fileRef(d.Ino, "f", f.Ino), Name: "user.k", Value: []byte("v")}))
	seen := map[uint64]bool{root: true, d.Ino: true, f.Ino: true}
	var last uint64
	for range 3 {
		e.reopen()
		if got := e.mustLookup(d.Ino, "f"); got.Ino != f.Ino {
			t.Fatalf("after reopen f is %d, want %d", got.Ino, f.Ino)
		}
		if got := e.names(d.Ino); strings.Join(got, ",") == "" {
			t.Fatalf("after reopen d lists %v", got)
		}
		a := e.create(rootCreds(), root, "n"+itoa(len(seen)), 0o644)
		if seen[a.Ino] || a.Ino <= last {
			t.Fatalf("ino %d reused or not increasing after restart (last %d)", a.Ino, last)
		}
		seen[a.Ino], last = true, a.Ino
	}
	v := must[*weftpb.GetXattrReply](t)(e.GetXattr(ctx, &weftpb.GetXattrRequest{Creds: rootCreds(), Node: fileRef(d.Ino, "f", f.Ino), Name: "user.k"}))
	if string(v.Value) != "v" {
		t.Fatalf("xattr after reopen %q", v.Value)
	}
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != 7 { // root, d, f, l, 3 new files
		t.Fatalf("files in use after reopen %d, want 7", st.Files)
	}
}

func TestInodesGauge(t *testing.T) {
	e := newEnv(t)
	e.create(rootCreds(), root, "a", 0o644)
	e.mkdir(rootCreds(), root, "b", 0o755)
	must[*weftpb.UnlinkReply](t)(e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: "a"}))
	reg := e.Server.cfg.Registry
	if got := gaugeValue(t, reg, "weft_meta_inodes"); got != 2 {
		t.Fatalf("inodes gauge %v, want 2", got)
	}
	if got := gaugeValue(t, reg, "weft_meta_directories"); got != 2 {
		t.Fatalf("directories gauge %v, want 2", got)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func TestClosedServerRefuses(t *testing.T) {
	e := newEnv(t)
	if err := e.Server.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := e.Lookup(ctx, &weftpb.LookupRequest{Creds: rootCreds(), Parent: root, Name: "x"})
	wantKind(t, err, errs.Unavailable)
	_, err = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "x"})
	wantKind(t, err, errs.Unavailable)
	if err := e.Server.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestAsyncModeReopen(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Durability = DurabilityAsync })
	for i := range 50 {
		e.create(rootCreds(), root, "f"+itoa(i), 0o644)
	}
	e.reopen() // Close syncs the WAL
	if got := len(e.names(root)); got != 50 {
		t.Fatalf("%d names after async reopen, want 50", got)
	}
}
