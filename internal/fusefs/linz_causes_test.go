package fusefs

import (
	"os"
	"testing"
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
