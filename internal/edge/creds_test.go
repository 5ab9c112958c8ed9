package edge

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestEveryServedMethodCanBeBound: a method the edge serves its clients
// without a request type here would be refused to every client of a
// secured cluster; this keeps the table complete.
func TestEveryServedMethodCanBeBound(t *testing.T) {
	served := append(slices.Clone(forwarded), weftpb.MethodLookup, weftpb.MethodGetAttr, weftpb.MethodReadDir)
	for _, m := range served {
		if requests[m] == nil {
			t.Errorf("method %d (%s) is served but has no request type to bind credentials in", m, weftpb.MethodName(m))
		}
	}
}

func TestBindCredentials(t *testing.T) {
	user := auth.Identity{Role: auth.RoleClient, UIDs: auth.Range{Min: 1000, Max: 1000}, GIDs: auth.Range{Min: 1000, Max: 1001}}
	encode := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	create := func(uid, gid uint32, groups ...uint32) []byte {
		return encode(&weftpb.CreateRequest{Creds: &weftpb.Creds{Uid: uid, Gid: gid, Groups: groups}, Parent: 1, Name: "f", Mode: 0o100644})
	}
	bound := func(id auth.Identity, msg []byte) *weftpb.CreateRequest {
		t.Helper()
		out, err := bindAs(id, weftpb.MethodCreate, msg)
		if err != nil {
			t.Fatal(err)
		}
		var r weftpb.CreateRequest
		if err := proto.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		if r.Name != "f" || r.Parent != 1 || r.Mode != 0o100644 {
			t.Fatalf("binding changed the request: %v", &r)
		}
		return &r
	}

	// Claiming root from a uid-1000 certificate: nobody.
	if c := bound(user, create(0, 0, 0, 1000)).Creds; c.Uid != auth.Nobody || c.Gid != auth.Nobody || !slices.Equal(c.Groups, []uint32{1000}) {
		t.Fatalf("uid 0 from a uid-1000 certificate bound to %v; want nobody with group 1000", c)
	}
	// Within the range: unchanged, byte for byte.
	in := create(1000, 1001, 1001)
	if out, err := bindAs(user, weftpb.MethodCreate, in); err != nil || !bytes.Equal(out, in) {
		t.Fatalf("credentials within the certificate: %v, changed %v", err, !bytes.Equal(out, in))
	}
	// Identities that act as anyone keep what they claim.
	for _, id := range []auth.Identity{{Role: auth.RoleAdmin}, {Role: auth.RoleClient, Root: true}} {
		if c := bound(id, create(0, 0)).Creds; c.Uid != 0 || c.Gid != 0 {
			t.Fatalf("%v: root bound to %v", id, c)
		}
	}
	// A store's certificate at an edge is nobody.
	if c := bound(auth.Identity{Role: auth.RoleStore}, create(0, 0)).Creds; c.Uid != auth.Nobody {
		t.Fatalf("a store identity kept %v", c)
	}
	// Another method's request (find).
	find := encode(&weftpb.FindRequest{Creds: &weftpb.Creds{Uid: 0}})
	out, err := bindAs(user, weftpb.MethodFind, find)
	if err != nil {
		t.Fatal(err)
	}
	var f weftpb.FindRequest
	if err := proto.Unmarshal(out, &f); err != nil || f.Creds.GetUid() != auth.Nobody {
		t.Fatalf("find's credentials bound to %v, %v", f.Creds, err)
	}

	// What the edge cannot bind is refused, never passed on.
	unknownField := protowire.AppendTag(create(0, 0), 999, protowire.VarintType)
	unknownField = protowire.AppendVarint(unknownField, 0)
	if _, err := bindAs(user, weftpb.MethodCreate, unknownField); !errs.Is(err, errs.NotSupported) {
		t.Fatalf("a request with an unknown field: %v; want NotSupported", err)
	}
	if _, err := bindAs(user, weftpb.MethodPeerApply, create(0, 0)); !errs.Is(err, errs.NotSupported) {
		t.Fatalf("a method without a request type: %v; want NotSupported", err)
	}
	if _, err := bindAs(user, weftpb.MethodCreate, []byte{0xff, 0xff}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("garbage: %v; want Invalid", err)
	}
}
