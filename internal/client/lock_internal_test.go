package client

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
)

// Locks of an inode go to the meta server whose id is in its top bits
// (modulo the number of servers the client knows).
func TestLockPeerRouting(t *testing.T) {
	c, err := New(Config{MetaAddrs: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, StoreAddrs: []string{"127.0.0.1:4"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		ino  core.Ino
		want int
	}{
		{core.RootIno, 0},
		{core.MakeIno(1, 77), 1},
		{core.MakeIno(2, 1<<40), 2},
		{core.MakeIno(4, 5), 1},
		{core.MakeIno(core.MaxServers-1, 9), (core.MaxServers - 1) % 3},
	} {
		i, p := c.lockPeer(tc.ino)
		if i != tc.want || p != c.metas[tc.want] {
			t.Errorf("ino %#x (server %d): meta %d, want %d", uint64(tc.ino), tc.ino.Server(), i, tc.want)
		}
	}
}
