package edge

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestWriteKeysNameWhatAChangeWrites(t *testing.T) {
	node := &weftpb.NodeRef{Ino: 7, Parent: 3, Name: "f"}
	for _, c := range []struct {
		method uint16
		req    proto.Message
		want   []lease.Key
	}{
		{weftpb.MethodCreate, &weftpb.CreateRequest{Parent: 3, Name: "f"}, []lease.Key{3}},
		{weftpb.MethodMkdir, &weftpb.MkdirRequest{Parent: 3, Name: "d"}, []lease.Key{3}},
		{weftpb.MethodSymlink, &weftpb.SymlinkRequest{Parent: 3, Name: "l"}, []lease.Key{3}},
		{weftpb.MethodUnlink, &weftpb.UnlinkRequest{Parent: 3, Name: "f"}, []lease.Key{3}},
		{weftpb.MethodRmdir, &weftpb.RmdirRequest{Parent: 3, Name: "d"}, []lease.Key{3}},
		{weftpb.MethodRename, &weftpb.RenameRequest{SrcParent: 3, SrcName: "a", DstParent: 4, DstName: "b"}, []lease.Key{3, 4}},
		{weftpb.MethodLink, &weftpb.LinkRequest{Node: node, NewParent: 4, NewName: "g"}, []lease.Key{7, 3, 4}},
		{weftpb.MethodSetAttr, &weftpb.SetAttrRequest{Node: node}, []lease.Key{7, 3}},
		{weftpb.MethodSetAttr, &weftpb.SetAttrRequest{Node: &weftpb.NodeRef{Ino: 7}}, []lease.Key{7}},
		{weftpb.MethodCommit, &weftpb.CommitRequest{Node: node}, []lease.Key{7, 3}},
		{weftpb.MethodSetXattr, &weftpb.SetXattrRequest{Node: node, Name: "user.x"}, []lease.Key{7, 3}},
		{weftpb.MethodRemoveXattr, &weftpb.RemoveXattrRequest{Node: node, Name: "user.x"}, []lease.Key{7, 3}},
		{weftpb.MethodApplyBatch, &weftpb.ApplyBatchRequest{Dir: 3}, []lease.Key{3}},
		{weftpb.MethodApplyBatch, &weftpb.ApplyBatchRequest{Dir: 3, Ops: []*weftpb.BatchOp{
			{Rename: &weftpb.BatchRename{Src: "a", Dst: "b", DstDir: 4}},
			{Create: &weftpb.BatchCreate{Name: "c", Dir: 5}},
			{Unlink: &weftpb.BatchUnlink{Name: "d"}},
		}}, []lease.Key{3, 4, 5}},
		{weftpb.MethodReadlink, &weftpb.ReadlinkRequest{Node: node}, nil}, // not a change
	} {
		msg, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := writeKeys(c.method, msg); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: keys %v; want %v", weftpb.MethodName(c.method), c.req, got, c.want)
		}
	}
}
