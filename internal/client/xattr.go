package client

import (
	"context"

	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Xattr flags, Linux values.
const (
	XattrCreate  = uint32(pb.XattrFlags_XATTR_CREATE)
	XattrReplace = uint32(pb.XattrFlags_XATTR_REPLACE)
)

// GetXattr returns the value of extended attribute name.
func (c *Client) GetXattr(ctx context.Context, ref Ref, name string) ([]byte, error) {
	if c.wbNoXattrs(ctx, ref) {
		return nil, &errs.Error{Kind: errs.NoData, Op: "getxattr", Path: name}
	}
	var r pb.GetXattrReply
	req := &pb.GetXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name}
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodGetXattr, req, &r, true)
	return r.Value, err
}

// SetXattr sets extended attribute name (flags: XattrCreate, XattrReplace).
func (c *Client) SetXattr(ctx context.Context, ref Ref, name string, value []byte, flags uint32) error {
	req := &pb.SetXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name, Value: value, Flags: flags}
	return c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodSetXattr, req, &pb.Empty{}, false)
}

// ListXattr returns the names of the extended attributes of ref.
func (c *Client) ListXattr(ctx context.Context, ref Ref) ([]string, error) {
	if c.wbNoXattrs(ctx, ref) {
		return nil, nil
	}
	var r pb.ListXattrReply
	req := &pb.ListXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodListXattr, req, &r, true)
	return r.Names, err
}

// RemoveXattr removes extended attribute name.
func (c *Client) RemoveXattr(ctx context.Context, ref Ref, name string) error {
	req := &pb.RemoveXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name}
	return c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodRemoveXattr, req, &pb.Empty{}, false)
}

// StatFS describes the file system's capacity.
type StatFS struct {
	Capacity  uint64 // bytes, over all stores, divided by replication
	Used      uint64 // bytes
	Files     uint64 // inodes in use
	FilesFree uint64
	NameMax   uint32
}

// StatFS sums the meta servers' inode counts and the stores' capacity.
func (c *Client) StatFS(ctx context.Context) (StatFS, error) {
	var out StatFS
	for _, m := range c.metas {
		var r pb.StatFSReply
		if err := c.callIdempotent(ctx, m, pb.MethodStatFS, &pb.StatFSRequest{}, &r); err != nil {
			return out, err
		}
		out.Files += r.Files
		out.FilesFree += r.FilesFree
		out.NameMax = r.NameMax
	}
	for _, s := range c.stores {
		var r pb.StoreStatFSReply
		if err := c.callIdempotent(ctx, s, pb.MethodStoreStatFS, &pb.StoreStatFSRequest{}, &r); err != nil {
			return out, err
		}
		out.Capacity += r.Capacity
		out.Used += r.Used
	}
	r := uint64(c.cfg.Replication)
	out.Capacity /= r
	out.Used /= r
	if c.ec != nil { // k of every k+m bytes stored are the files'
		k, w := uint64(c.ec.scheme.K), uint64(c.ec.scheme.Width())
		out.Capacity, out.Used = out.Capacity/w*k, out.Used/w*k
	}
	return out, nil
}
