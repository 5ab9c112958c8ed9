package auth

import (
	"crypto/x509"
	"net/url"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

func TestIdentityRoundTrip(t *testing.T) {
	for _, id := range []Identity{
		{Role: RoleMeta},
		{Role: RoleStore},
		{Role: RoleAdmin},
		{Role: RoleClient, Root: true},
		{Role: RoleClient, UIDs: Range{1000, 1000}, GIDs: Range{1000, 1000}},
		{Role: RoleClient, UIDs: Range{1000, 1999}, GIDs: Range{100, 100}},
	} {
		got, err := ParseIdentity(id.String())
		if err != nil || got != id {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want %+v", id.String(), got, err, id)
		}
	}
	// The gid range defaults to the uid range.
	if got, err := ParseIdentity("weft:role=client;uids=7-9"); err != nil || got.GIDs != (Range{7, 9}) {
		t.Errorf("no gids: %+v, %v", got, err)
	}
}

func TestParseIdentityRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"weft:",
		"spiffe:role=admin",
		"weft:role=god",
		"weft:role=client",                    // a client names its uids
		"weft:role=client;uids=5-4",           // empty range
		"weft:role=client;uids=-1",            // not a uid
		"weft:role=client;uids=4294967296",    // too large
		"weft:role=client;uids=1;uids=0",      // repeated
		"weft:role=client;uids=root;gids=0-9", // root takes no range
		"weft:role=admin;uids=0",              // only clients name uids
		"weft:role=client;uids=1;color=red",   // unknown key
		"weft:role=admin;role=client",         // repeated role
	} {
		if id, err := ParseIdentity(s); !errs.Is(err, errs.Invalid) {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want Invalid", s, id, err)
		}
	}
}

func TestIdentityOfNeedsExactlyOneURI(t *testing.T) {
	u1, _ := url.Parse("weft:role=admin")
	u2, _ := url.Parse("weft:role=client;uids=root")
	other, _ := url.Parse("https://example.com/")
	if _, err := IdentityOf(&x509.Certificate{URIs: []*url.URL{other}}); !errs.Is(err, errs.Permission) {
		t.Errorf("no weft URI: %v", err)
	}
	if _, err := IdentityOf(&x509.Certificate{URIs: []*url.URL{u1, u2}}); !errs.Is(err, errs.Permission) {
		t.Errorf("two weft URIs: %v", err)
	}
	if id, err := IdentityOf(&x509.Certificate{URIs: []*url.URL{other, u1}}); err != nil || id.Role != RoleAdmin {
		t.Errorf("one weft URI: %+v, %v", id, err)
	}
}

func TestActsAsAnyone(t *testing.T) {
	for _, c := range []struct {
		id   Identity
		want bool
	}{
		{Identity{Role: RoleAdmin}, true},
		{Identity{Role: RoleMeta}, true},
		{Identity{Role: RoleClient, Root: true}, true},
		{Identity{Role: RoleStore}, false},
		{Identity{Role: RoleClient, UIDs: Range{0, 0}, GIDs: Range{0, 0}}, false},
	} {
		if got := c.id.ActsAsAnyone(); got != c.want {
			t.Errorf("%s: ActsAsAnyone = %v", c.id, got)
		}
	}
}

// FuzzParseIdentity checks that whatever a certificate's URI says, parsing
// either refuses it or yields a valid identity that encodes back to a
// string parsing to the same identity. The seeds in testdata/fuzz are
// replayed by go test.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{
		"weft:role=client;uids=1000-1000",
		"weft:role=client;uids=root",
		"weft:role=admin",
		"weft:role=client;uids=0-10;gids=5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseIdentity(s)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("ParseIdentity(%q): error of kind %v", s, errs.KindOf(err))
			}
			return
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("ParseIdentity(%q) = %+v, which does not validate: %v", s, id, err)
		}
		again, err := ParseIdentity(id.String())
		if err != nil || again != id {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, id, id.String(), again, err)
		}
	})
}
