package config

import (
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/erasure"
)

func stores(n int) string {
	var b strings.Builder
	b.WriteString("[[meta]]\naddr = \"127.0.0.1:7000\"\n")
	for i := range n {
		b.WriteString("[[store]]\naddr = \"127.0.0.1:71" + string(rune('0'+i)) + "0\"\nbackend = \"mem\"\nmem_limit = \"1GiB\"\n")
	}
	return b.String()
}

func TestRedundancy(t *testing.T) {
	for _, tc := range []struct {
		file    string
		repl    int
		scheme  erasure.Scheme
		problem string // substring of the error; "" for none
	}{
		{file: stores(5), repl: 1},
		{file: "redundancy = \"replicas:2\"\n" + stores(2), repl: 2},
		{file: "redundancy = \"ec:4+1\"\n" + stores(5), repl: 1, scheme: erasure.Scheme{K: 4, M: 1}},
		{file: "redundancy = \"ec:4+1\"\n" + stores(4), problem: "needs 5 distinct store servers"},
		{file: "redundancy = \"ec:4+1\"\nreplication = 2\n" + stores(5), problem: "replication must be 1"},
		{file: "redundancy = \"replicas:2\"\nreplication = 3\n" + stores(3), problem: "disagrees with replication = 3"},
		{file: "redundancy = \"replicas:3\"\n" + stores(2), problem: "more than the 2 store servers"},
		{file: "redundancy = \"raid5\"\n" + stores(5), problem: "want replicas:N or ec:K+M"},
		{file: "redundancy = \"ec:4+0\"\n" + stores(5), problem: "parity units"},
	} {
		c, err := Parse([]byte(tc.file))
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: error %v, want one saying %q", tc.file[:30], err, tc.problem)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.file[:30], err)
			continue
		}
		if c.Replication != tc.repl || c.Erasure() != tc.scheme {
			t.Errorf("%q: replication %d, scheme %v; want %d, %v", tc.file[:30], c.Replication, c.Erasure(), tc.repl, tc.scheme)
		}
	}
}

func TestSetRedundancyRoundTrip(t *testing.T) {
	c, err := Parse([]byte(stores(5)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetRedundancy("ec:3+2"); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/cluster.toml"
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Erasure() != (erasure.Scheme{K: 3, M: 2}) || d.RedundancyString() != "ec:3+2" {
		t.Fatalf("after a round trip: %v (%s)", d.Erasure(), d.RedundancyString())
	}
	if err := c.SetRedundancy("ec:x"); err == nil {
		t.Fatal("SetRedundancy accepted ec:x")
	}
}
