package meta

import (
	"os"
	"strings"
	"testing"
)

// TestFormatDocListsKeys: docs/format.md names every system key and key tag
// (it once lacked Sservers).
func TestFormatDocListsKeys(t *testing.T) {
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{keyFormat, keyInoHWM, keyInodes, keyDirs, keyServerID, keyServers,
		keyInodesOf(0)[:len(keyInodesOf(0))-2], keyDirsOf(0)[:len(keyDirsOf(0))-2]} {
		if !strings.Contains(string(doc), "`"+string(k)) {
			t.Errorf("docs/format.md does not list the key %q", k)
		}
	}
	for _, tag := range []byte{tagInode, tagEntry, tagXattr, tagSplit, tagIntent} {
		if !strings.Contains(string(doc), "| `"+string(tag)+"` ") {
			t.Errorf("docs/format.md does not list the key tag %q", tag)
		}
	}
}
