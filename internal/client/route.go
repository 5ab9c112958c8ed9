package client

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// GIGA+ routing (DESIGN: namespace). The client keeps, per directory, the
// bitmap of its partitions as far as it has learned them; a new client knows
// only partition 0. A request about a name goes to the server of the name's
// partition by that bitmap; a server whose partition does not hold the name
// answers WrongServer with its own bitmap, which the client merges before it
// tries again. Requests by ino go to the ino's owner (the server that
// allocated it).

// maxMaps bounds the bitmaps a client caches; past it the cache starts over
// (a forgotten bitmap costs a few redirects, never a wrong answer).
const maxMaps = 1 << 16

// maxRedirects bounds the redirects of one request: each one adds at least
// one partition, and a directory has at most as many as there are servers.
const maxRedirects = 64

type dirMaps struct {
	mu        sync.Mutex
	m         map[core.Ino][]byte
	redirects atomic.Uint64
}

// bitmap returns a copy of what the client knows of dir's partitions.
func (d *dirMaps) bitmap(dir core.Ino) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.m[dir]; ok {
		return append([]byte(nil), b...)
	}
	return []byte{1}
}

// learn merges a server's bitmap of dir.
func (d *dirMaps) learn(dir core.Ino, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= maxMaps {
		d.m = map[core.Ino][]byte{}
	}
	old, ok := d.m[dir]
	if !ok {
		old = []byte{1}
	}
	if core.BitmapGrows(old, b) {
		d.m[dir] = core.BitmapOr(append([]byte(nil), old...), b)
	}
}

// Redirects returns how many requests a server sent back to the client for
// another server (stale partition maps) since the client started.
func (c *Client) Redirects() uint64 { return c.maps.redirects.Load() }

// ownerPeer is the meta server that owns ino.
func (c *Client) ownerPeer(ino core.Ino) *rpc.Peer {
	if s := ino.Server(); s < len(c.metas) {
		return c.metas[s]
	}
	return c.metas[0]
}

// partPeer is the meta server of partition p of dir.
func (c *Client) partPeer(dir core.Ino, p uint32) *rpc.Peer {
	return c.metas[core.PartitionServer(dir, p, len(c.metas))]
}

// send sends one request to p: once if it mutates, retried while the server
// is unreachable if it is idempotent.
func (c *Client) send(ctx context.Context, p *rpc.Peer, method uint16, req, resp proto.Message, idempotent bool) error {
	if mutating[method] {
		// Patchgroups: what the change depends on is durable first.
		after, err := c.beforeMeta(ctx, p)
		if err != nil {
			return err
		}
		defer after()
	}
	if idempotent {
		return c.callIdempotent(ctx, p, method, req, resp)
	}
	return call(ctx, p, method, req, resp)
}

// callName sends a request about name in dir to the server whose partition
// holds it, following redirects. A redirected request was not applied, so
// resending a mutation is safe.
func (c *Client) callName(ctx context.Context, dir core.Ino, name string, method uint16, req, resp proto.Message, idempotent bool) error {
	if method != pb.MethodLookup && method != pb.MethodGetAttr && !c.wbOpenAlone(dir, name, req) {
		// Queued write-back changes in dir reach the servers first.
		if err := c.wbBarrierName(ctx, dir, name, method); err != nil {
			return err
		}
		defer c.wbForgetName(dir, name, method)
	}
	if len(c.metas) == 1 {
		return c.send(ctx, c.metas[0], method, req, resp, idempotent)
	}
	h := core.NameHash(name)
	for range maxRedirects {
		used := c.maps.bitmap(dir)
		p := core.PartitionOf(h, used)
		err := c.send(ctx, c.partPeer(dir, p), method, req, resp, idempotent)
		b, ok := redirectBitmap(err)
		if !ok {
			return err
		}
		c.maps.redirects.Add(1)
		c.maps.learn(dir, b)
		if !core.BitmapGrows(used, b) {
			// The server knows no partition the request did not: the
			// maps cannot converge.
			return errs.Wrap(errs.Protocol, "route", name, err)
		}
	}
	return errs.New(errs.Protocol, "route", "too many redirects for %q", name)
}

// callRef sends a request about the node that node (a field of req) names:
// by its entry when it has one, else, or when the server says the node's
// attributes live with its owner, by ino to the owner. node is changed in
// place for the next try. A file open here that another client renamed is
// found again and asked there (relocate.go).
func (c *Client) callRef(ctx context.Context, node *pb.NodeRef, clear func(), method uint16, req, resp proto.Message, idempotent bool) error {
	err := c.callRefOnce(ctx, node, clear, method, req, resp, idempotent)
	for range maxRelocations {
		if !relocatable(err) || node.GetIno() == 0 || node.GetParent() == 0 || node.GetName() == "" || isByName(ctx) {
			return err
		}
		to, r := c.relocateOpen(ctx, Ref{Ino: core.Ino(node.Ino), Parent: core.Ino(node.Parent), Name: node.Name})
		switch r {
		case notOpen:
			return err
		case gone:
			if errs.Is(err, errs.Stale) {
				return errs.Wrap(errs.NotExist, pb.MethodName(method), node.Name, err)
			}
			return err
		}
		node.Parent, node.Name = uint64(to.Parent), to.Name
		err = c.callRefOnce(ctx, node, clear, method, req, resp, idempotent)
	}
	return err
}

func (c *Client) callRefOnce(ctx context.Context, node *pb.NodeRef, clear func(), method uint16, req, resp proto.Message, idempotent bool) error {
	if node.GetParent() != 0 && node.GetName() != "" {
		err := c.callName(ctx, core.Ino(node.GetParent()), node.GetName(), method, req, resp, idempotent)
		if !isOwnerRedirect(err) || node.GetIno() == 0 {
			return err
		}
		clear()
	}
	return c.send(ctx, c.ownerPeer(core.Ino(node.GetIno())), method, req, resp, idempotent)
}

// redirectBitmap returns the bitmap a WrongServer answer carries.
func redirectBitmap(err error) ([]byte, bool) {
	if !errs.Is(err, errs.WrongServer) {
		return nil, false
	}
	e, ok := err.(*errs.Error)
	if !ok {
		return nil, false
	}
	hx, ok := strings.CutPrefix(e.Msg, "bitmap ")
	if !ok {
		return nil, false
	}
	b, derr := hex.DecodeString(hx)
	return b, derr == nil
}

// isOwnerRedirect reports a WrongServer answer that sends the client to the
// node's owner.
func isOwnerRedirect(err error) bool {
	e, ok := err.(*errs.Error)
	return ok && e.Kind == errs.WrongServer && e.Msg == "owner"
}

// MetaStatus asks meta server id what it holds (weft status).
func (c *Client) MetaStatus(ctx context.Context, id int) (*pb.StatusReply, error) {
	if id < 0 || id >= len(c.metas) {
		return nil, errs.New(errs.Invalid, "status", "no meta server %d", id)
	}
	r := &pb.StatusReply{}
	return r, c.callIdempotent(ctx, c.metas[id], pb.MethodStatus, &pb.StatusRequest{TopPartitions: 5}, r)
}
