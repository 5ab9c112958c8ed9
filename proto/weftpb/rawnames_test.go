package weftpb

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestNamesAreRawBytes: a file name or symlink target may be any bytes but
// NUL and '/' (Linux allows names that are not UTF-8); make proto's rawnames
// step lets them through proto3's UTF-8 check. Other strings keep it.
func TestNamesAreRawBytes(t *testing.T) {
	name := "caf\xe9 \xff\xfe" // Latin-1, not UTF-8
	for _, m := range []proto.Message{
		&LookupRequest{Name: name},
		&CreateRequest{Name: name},
		&SymlinkRequest{Name: name, Target: "../" + name},
		&ReadlinkReply{Target: name},
		&RenameRequest{SrcName: name, DstName: name},
		&LinkRequest{NewName: name},
		&ReadDirReply{Entries: []*DirEntryMsg{{Name: name}}},
		&GetAttrRequest{Node: &NodeRef{Name: name}},
		&PeerGetRequest{Name: name},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Errorf("%T with a non-UTF-8 name: %v", m, err)
			continue
		}
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(m, back) {
			t.Errorf("%T round trip: %v", m, err)
		}
	}
	if _, err := proto.Marshal(&SetXattrRequest{Name: "user.\xff"}); err == nil {
		t.Error("an xattr name that is not UTF-8 was marshalled: the UTF-8 check is off everywhere")
	}
}
