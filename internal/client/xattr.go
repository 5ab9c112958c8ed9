package client

import (
	"context"

	pb "github.com/weftfs/weft/proto/weftpb"
)

// Xattr flags, Linux values.
const (
	XattrCreate  = uint32(pb.XattrFlags_XATTR_CREATE)
	XattrReplace = uint32(pb.XattrFlags_XATTR_REPLACE)
)

// GetXattr returns the value of extended attribute name.
func (c *Client) GetXattr(ctx context.Context, ref Ref, name string) ([]byte, error) {
	var r pb.GetXattrReply
	err := c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodGetXattr,
		&pb.GetXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name}, &r)
	return r.Value, err
}

// SetXattr sets extended attribute name (flags: XattrCreate, XattrReplace).
func (c *Client) SetXattr(ctx context.Context, ref Ref, name string, value []byte, flags uint32) error {
	return call(ctx, c.metaFor(ref.Parent), pb.MethodSetXattr, &pb.SetXattrRequest{
		Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name, Value: value, Flags: flags,
	}, &pb.Empty{})
}

// ListXattr returns the names of the extended attributes of ref.
func (c *Client) ListXattr(ctx context.Context, ref Ref) ([]string, error) {
	var r pb.ListXattrReply
	err := c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodListXattr,
		&pb.ListXattrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}, &r)
	return r.Names, err
}

// RemoveXattr removes extended attribute name.
func (c *Client) RemoveXattr(ctx context.Context, ref Ref, name string) error {
	return call(ctx, c.metaFor(ref.Parent), pb.MethodRemoveXattr, &pb.RemoveXattrRequest{
		Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Name: name,
	}, &pb.Empty{})
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
	return out, nil
}
