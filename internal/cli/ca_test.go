package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/auth"
)

func TestCAIssueFlags(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, _, err := run(ctx, "ca", "init", "--ca", ca); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(ctx, "ca", "init", "--ca", ca); ExitCode(err) != 7 {
		t.Errorf("init over an existing CA: %v (exit %d); want exit 7", err, ExitCode(err))
	}
	for _, c := range []struct {
		args []string
		want string // identity, or "usage"
	}{
		{[]string{"--role", "client", "--uid", "1000"}, "weft:role=client;uids=1000-1000"},
		{[]string{"--role", "client", "--uids", "1000-1999", "--gids", "100"}, "weft:role=client;uids=1000-1999;gids=100-100"},
		{[]string{"--role", "client", "--root"}, "weft:role=client;uids=root"},
		{[]string{"--role", "admin"}, "weft:role=admin"},
		{[]string{"--role", "store", "--host", "10.0.0.7"}, "weft:role=store"},
		{[]string{"--role", "client"}, "usage"},
		{[]string{"--role", "client", "--uid", "1", "--root"}, "usage"},
		{[]string{"--role", "client", "--uids", "9-1"}, "usage"},
		{[]string{"--role", "admin", "--uid", "0"}, "usage"},
		{[]string{"--role", "god"}, "usage"},
	} {
		out := filepath.Join(dir, "id")
		_, _, err := run(ctx, append([]string{"ca", "issue", "--ca", ca, "--out", out}, c.args...)...)
		if c.want == "usage" {
			if ExitCode(err) != 2 {
				t.Errorf("%v: %v (exit %d); want a usage error", c.args, err, ExitCode(err))
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		b, err := auth.LoadIdentity(out)
		if err != nil || b.Identity.String() != c.want {
			t.Errorf("%v: issued %v, %v; want %s", c.args, b, err, c.want)
		}
		if strings.Contains(c.want, "store") && !b.Cert.Leaf.IPAddresses[len(b.Cert.Leaf.IPAddresses)-1].Equal([]byte{10, 0, 0, 7}) {
			t.Errorf("--host not in the certificate: %v", b.Cert.Leaf.IPAddresses)
		}
	}
	if _, _, err := run(ctx, "ca", "rotate", "--ca", ca); err != nil {
		t.Fatal(err)
	}
}
