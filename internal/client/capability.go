package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Capabilities (internal/auth). The meta server's open and create replies
// carry a capability for the file's chunks; the client keeps it with the
// file's open state (a read one and a write one: a file opened read-only
// and then read-write here holds both) and attaches it to every store
// request for the file. When a store refuses it (errs.CapabilityRefused:
// it expired, or a chmod, chown or truncate revoked it), the client asks
// the meta server for a fresh one (GetCapability, which checks the
// caller's access again) and tries once more; if the meta server refuses,
// the request fails with its error (EACCES). With capabilities off the
// replies carry none and the stores ask for none.

// fileCaps are the capabilities of one open file, and when each is due for
// renewal by this machine's clock (its lifetime, as the token says, less
// renewMargin, from when it arrived): a store call renews first rather than
// send a chunk the store would refuse. The meta server's clock never meets
// this one.
type fileCaps struct {
	read, write       []byte
	readDue, writeDue time.Time
}

// renewMargin is how long before its expiry a capability is renewed.
const renewMargin = 10 * time.Second

// setCapability keeps tok for the rights it grants. The client cannot
// verify it (it has no key) but reads which rights it carries.
func (n *openInode) setCapability(tok []byte) {
	c, err := auth.Decode(tok)
	if err != nil {
		return
	}
	due := time.Now().Add(time.Duration(c.ExpiryNs-c.IssuedNs) - renewMargin)
	n.caps.Lock()
	defer n.caps.Unlock()
	if c.Rights&auth.Read != 0 {
		n.caps.held.read, n.caps.held.readDue = tok, due
	}
	if c.Rights&auth.Write != 0 {
		n.caps.held.write, n.caps.held.writeDue = tok, due
	}
}

func (n *openInode) capability(right auth.Rights) []byte {
	tok, _ := n.capabilityDue(right)
	return tok
}

// capabilityDue returns the capability for right and whether it is due for
// renewal.
func (n *openInode) capabilityDue(right auth.Rights) ([]byte, bool) {
	n.caps.Lock()
	defer n.caps.Unlock()
	h := &n.caps.held
	if right == auth.Read {
		return h.read, h.read != nil && time.Now().After(h.readDue)
	}
	return h.write, h.write != nil && time.Now().After(h.writeDue)
}

// openState returns ino's open state, or nil, without taking a reference:
// for the capability only.
func (c *Client) openState(ino core.Ino) *openInode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.open[ino]
}

// withCapability runs call with the capability this client holds for right
// over ino's chunks and, if a store refuses it, once more with a fresh one
// (see above). call must build its request from the token it gets: calls
// for several replicas run at once.
func (c *Client) withCapability(ctx context.Context, ino core.Ino, right auth.Rights, call func(tok []byte) error) error {
	n := c.openState(ino)
	var tok []byte
	if n != nil {
		var due bool
		tok, due = n.capabilityDue(right)
		if due {
			if fresh, err := c.refreshCapability(ctx, n, right); err == nil {
				tok = fresh
			} // else the old one may still do; a refusal renews again
		}
	}
	err := call(tok)
	if !errs.Is(err, errs.CapabilityRefused) || n == nil {
		return err
	}
	fresh, ferr := c.refreshCapability(ctx, n, right)
	if ferr != nil {
		return ferr
	}
	return call(fresh)
}

// refreshCapability fetches a fresh capability for right over n's chunks
// from the meta server, keeps it, and returns it. It passes the one it had
// along: a file unlinked while open has no record left to check access
// with, and the meta server renews a capability it minted for it instead.
func (c *Client) refreshCapability(ctx context.Context, n *openInode, right auth.Rights) ([]byte, error) {
	n.mu.Lock()
	ref, creds := n.mu.ref, n.mu.creds // the identity that commits
	n.mu.Unlock()
	if cr, ok := ctx.Value(credsKey{}).(core.Creds); ok {
		creds = cr // the caller's, where it says (a read-ahead does not)
	}
	req := &pb.GetCapabilityRequest{Creds: credsPB(creds), Node: ref.pb(), Rights: uint32(right), Previous: n.capability(right)}
	var r pb.GetCapabilityReply
	if err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodGetCapability, req, &r, true); err != nil {
		return nil, errs.Wrap(errs.KindOf(err), "renew capability", ref.Name, err)
	}
	if len(r.Capability) == 0 {
		return nil, errs.New(errs.CapabilityRefused, "renew capability", "the meta server minted none (capabilities off there, on at the store?)")
	}
	n.setCapability(r.Capability)
	return r.Capability, nil
}
