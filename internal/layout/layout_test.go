package layout

import (
	"os"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/core"
)

// TestFormatDocListsEveryKey: docs/format.md, the format's reference, has a
// row in its key table for every tag and every system key.
func TestFormatDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if cell, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.IndexByte(cell, '`'); i > 0 {
				rows[cell[:i]] = true
			}
		}
	}
	for _, tag := range Tags() {
		if tag == TagSystem {
			continue // its keys are checked one by one below
		}
		if !rows[string(tag)] {
			t.Errorf("docs/format.md has no key table row for tag %q", tag)
		}
	}
	for _, k := range []string{KeyFormat, KeyInoHWM, KeyInodes, KeyDirs, KeyServerID, KeyServers, KeyInodesOf, KeyDirsOf, KeySearchIndex} {
		if !rows[k] {
			t.Errorf("docs/format.md has no key table row for system key %q", k)
		}
	}
}

// TestKeysRoundTrip: what the encoders write, the decoders read back, and
// every key of an inode sorts inside its prefix.
func TestKeysRoundTrip(t *testing.T) {
	dir := core.Ino(1<<52 | 77)
	k := EntryKey(dir, 3, "name")
	d, part, hash, name, ok := EntryKeyParts(k)
	if !ok || d != dir || part != 3 || hash != core.NameHash("name") || name != "name" {
		t.Fatalf("entry key parts: %v %v %v %q %v", d, part, hash, name, ok)
	}
	ino, seq, ok := ReclaimKeyParts(ReclaimKey(dir, 42))
	if !ok || ino != dir || seq != 42 {
		t.Fatalf("reclaim key parts: %v %v %v", ino, seq, ok)
	}
	if _, _, ok := ReclaimKeyParts(InodeKey(dir)); ok {
		t.Fatal("an inode key read as a reclaim key")
	}
	p := ReclaimPrefix(dir)
	if string(ReclaimKey(dir, ^uint64(0))) >= string(PrefixEnd(p)) || string(ReclaimKey(dir, 0)) < string(p) {
		t.Fatal("reclaim keys outside their prefix range")
	}
}
