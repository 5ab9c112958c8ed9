package core

import (
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want errs.Kind
		ok   bool
	}{
		{"a", 0, true},
		{strings.Repeat("x", 255), 0, true},
		{"héllo wörld", 0, true},
		{"...", 0, true},
		{"", errs.NotExist, false},
		{".", errs.Invalid, false},
		{"..", errs.Invalid, false},
		{"a/b", errs.Invalid, false},
		{"a\x00b", errs.Invalid, false},
		{strings.Repeat("x", 256), errs.NameTooLong, false},
	} {
		err := ValidateName("create", tc.name)
		if tc.ok != (err == nil) || !tc.ok && errs.KindOf(err) != tc.want {
			t.Errorf("ValidateName(%q) = %v, want ok=%v kind %q", tc.name, err, tc.ok, tc.want)
		}
	}
}

// FuzzValidateName checks that validation never panics and accepts exactly
// the names a Linux directory entry may have.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "", ".", "..", "a/b", "x\x00", strings.Repeat("y", 256), "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName("fuzz", name)
		legal := name != "" && name != "." && name != ".." && len(name) <= MaxNameLen &&
			!strings.ContainsAny(name, "/\x00")
		if legal != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v, legal = %v", name, err, legal)
		}
		if err != nil && errs.KindOf(err) == errs.Other {
			t.Fatalf("ValidateName(%q): error without a kind: %v", name, err)
		}
	})
}

func TestSpans(t *testing.T) {
	spans := Spans(100, 300, 128)
	var total int64
	for i, s := range spans {
		if s.Offset+s.Len > 128 || s.Len <= 0 {
			t.Fatalf("span %d out of its chunk: %+v", i, s)
		}
		if s.FileOf != 100+total || int64(s.Index)*128+s.Offset != s.FileOf {
			t.Fatalf("span %d misplaced: %+v", i, s)
		}
		total += s.Len
	}
	if total != 300 || len(spans) != 4 {
		t.Fatalf("spans cover %d bytes in %d spans, want 300 in 4", total, len(spans))
	}
	if ChunkCount(0, 128) != 0 || ChunkCount(128, 128) != 1 || ChunkCount(129, 128) != 2 {
		t.Fatal("ChunkCount wrong")
	}
}

func TestIno(t *testing.T) {
	i := MakeIno(7, 12345)
	if i.Server() != 7 || i.Seq() != 12345 {
		t.Fatalf("MakeIno(7, 12345) = server %d seq %d", i.Server(), i.Seq())
	}
}
