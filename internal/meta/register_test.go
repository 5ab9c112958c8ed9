package meta

import (
	"net"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// The meta protocol over real loopback TCP: success replies and error kinds
// reach the client.
func TestServeOverRPC(t *testing.T) {
	e := newEnv(t)
	mux := rpc.NewMux()
	e.Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := rpc.Dial(ctx, ln.Addr().String(), rpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	var mk weftpb.MkdirReply
	if err := conn.Call(ctx, weftpb.MethodMkdir, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "d", Mode: 0o755}, &mk); err != nil {
		t.Fatal(err)
	}
	var cr weftpb.CreateReply
	if err := conn.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: rootCreds(), Parent: mk.Attr.Ino, Name: "f", Mode: 0o644}, &cr); err != nil {
		t.Fatal(err)
	}
	var lk weftpb.LookupReply
	if err := conn.Call(ctx, weftpb.MethodLookup, &weftpb.LookupRequest{Creds: rootCreds(), Parent: mk.Attr.Ino, Name: "f"}, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Attr.Ino != cr.Attr.Ino {
		t.Fatalf("lookup over rpc: %+v", lk.Attr)
	}
	var rd weftpb.ReadDirReply
	if err := conn.Call(ctx, weftpb.MethodReadDir, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: mk.Attr.Ino}, &rd); err != nil {
		t.Fatal(err)
	}
	if len(rd.Entries) != 1 || rd.Entries[0].Name != "f" || !rd.Eof {
		t.Fatalf("readdir over rpc: %+v", &rd)
	}
	err = conn.Call(ctx, weftpb.MethodMkdir, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "d"}, &mk)
	wantKind(t, err, errs.Exist)
	err = conn.Call(ctx, weftpb.MethodLookup, &weftpb.LookupRequest{Parent: root, Name: "d"}, &lk)
	wantKind(t, err, errs.Invalid)
	var empty weftpb.Empty
	err = conn.Call(ctx, weftpb.MethodRmdir, &weftpb.RmdirRequest{Creds: rootCreds(), Parent: root, Name: "d"}, &empty)
	wantKind(t, err, errs.NotEmpty)
	// Every meta method has a handler: an empty request gets a kind from the
	// server, never "no such method".
	for m := uint16(weftpb.MethodLookup); m <= weftpb.MethodRemoveXattr; m++ {
		err := conn.Call(ctx, m, &weftpb.Empty{}, &weftpb.Empty{})
		if m == weftpb.MethodStatFS {
			continue
		}
		if !errs.Is(err, errs.Invalid) {
			t.Errorf("method %s with an empty request: %v", weftpb.MethodName(m), err)
		}
	}
}
