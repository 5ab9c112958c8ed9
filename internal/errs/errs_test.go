package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestKindSurvivesWrapping(t *testing.T) {
	base := New(NotExist, "lookup", "no entry %q", "a")
	wrapped := fmt.Errorf("resolve /x/a: %w", base)
	if KindOf(wrapped) != NotExist || !Is(wrapped, NotExist) || !errors.Is(wrapped, NotExist) {
		t.Fatalf("kind lost through %%w: %v", KindOf(wrapped))
	}
	if errors.Is(wrapped, Exist) {
		t.Fatal("errors.Is matched the wrong kind")
	}
	p := WithPath(wrapped, "stat", "/x/a")
	if KindOf(p) != NotExist || p.Error() != `stat /x/a: resolve /x/a: lookup: no entry "a"` {
		t.Fatalf("WithPath: kind %v, text %q", KindOf(p), p.Error())
	}
	if KindOf(errors.New("plain")) != Other || KindOf(nil) != Other || Is(nil, Other) {
		t.Fatal("plain and nil errors")
	}
	if Wrap(IO, "op", "", nil) != nil {
		t.Fatal("Wrap of nil must be nil")
	}
}

func TestKindValid(t *testing.T) {
	for k := Kind(0); k < kindCount; k++ {
		if !k.Valid() || k.String() == "" || k.String()[:4] == "kind" {
			t.Errorf("kind %d has no name", k)
		}
	}
	if Kind(200).Valid() {
		t.Error("kind 200 must be invalid")
	}
}
