package edge

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Credentials on a secured cluster. Upstream, the edge's certificate
// (role edge) acts as anyone, as a meta server's does: the upstream meta
// servers trust the credentials in what the edge forwards. So the edge
// binds them itself, before a request is forwarded or looked up in the
// cache, exactly as a meta server binds a direct client's
// (auth.Identity.Bind): every Creds message in the request, at any depth,
// is limited to what the caller's certificate allows. A request the edge
// cannot parse completely (a method it does not know, fields it does not
// know, which might carry credentials of a newer version) is refused
// rather than passed on unbound.

// requests are the request types of the methods the edge serves for its
// clients (forwarded and cached).
var requests = map[uint16]func() proto.Message{
	weftpb.MethodLookup:         func() proto.Message { return new(weftpb.LookupRequest) },
	weftpb.MethodGetAttr:        func() proto.Message { return new(weftpb.GetAttrRequest) },
	weftpb.MethodReadDir:        func() proto.Message { return new(weftpb.ReadDirRequest) },
	weftpb.MethodSetAttr:        func() proto.Message { return new(weftpb.SetAttrRequest) },
	weftpb.MethodCreate:         func() proto.Message { return new(weftpb.CreateRequest) },
	weftpb.MethodMkdir:          func() proto.Message { return new(weftpb.MkdirRequest) },
	weftpb.MethodSymlink:        func() proto.Message { return new(weftpb.SymlinkRequest) },
	weftpb.MethodReadlink:       func() proto.Message { return new(weftpb.ReadlinkRequest) },
	weftpb.MethodUnlink:         func() proto.Message { return new(weftpb.UnlinkRequest) },
	weftpb.MethodRmdir:          func() proto.Message { return new(weftpb.RmdirRequest) },
	weftpb.MethodRename:         func() proto.Message { return new(weftpb.RenameRequest) },
	weftpb.MethodLink:           func() proto.Message { return new(weftpb.LinkRequest) },
	weftpb.MethodOpen:           func() proto.Message { return new(weftpb.OpenRequest) },
	weftpb.MethodCommit:         func() proto.Message { return new(weftpb.CommitRequest) },
	weftpb.MethodAccess:         func() proto.Message { return new(weftpb.AccessRequest) },
	weftpb.MethodStatFS:         func() proto.Message { return new(weftpb.StatFSRequest) },
	weftpb.MethodGetXattr:       func() proto.Message { return new(weftpb.GetXattrRequest) },
	weftpb.MethodSetXattr:       func() proto.Message { return new(weftpb.SetXattrRequest) },
	weftpb.MethodListXattr:      func() proto.Message { return new(weftpb.ListXattrRequest) },
	weftpb.MethodRemoveXattr:    func() proto.Message { return new(weftpb.RemoveXattrRequest) },
	weftpb.MethodStatus:         func() proto.Message { return new(weftpb.StatusRequest) },
	weftpb.MethodScan:           func() proto.Message { return new(weftpb.ScanRequest) },
	weftpb.MethodReleaseReclaim: func() proto.Message { return new(weftpb.ReleaseReclaimRequest) },
	weftpb.MethodGetCapability:  func() proto.Message { return new(weftpb.GetCapabilityRequest) },
	weftpb.MethodFind:           func() proto.Message { return new(weftpb.FindRequest) },
	weftpb.MethodSyncMeta:       func() proto.Message { return new(weftpb.SyncMetaRequest) },
	weftpb.MethodLocate:         func() proto.Message { return new(weftpb.LocateRequest) },
	weftpb.MethodSetLock:        func() proto.Message { return new(weftpb.SetLockRequest) },
	weftpb.MethodGetLock:        func() proto.Message { return new(weftpb.GetLockRequest) },
	weftpb.MethodLockKeepAlive:  func() proto.Message { return new(weftpb.LockKeepAliveRequest) },
	weftpb.MethodAllocInos:      func() proto.Message { return new(weftpb.AllocInosRequest) },
	weftpb.MethodApplyBatch:     func() proto.Message { return new(weftpb.ApplyBatchRequest) },
}

// bindRequest returns msg, a client's request for method, with its
// credentials limited to what the caller's certificate allows; msg itself
// when there is nothing to limit (no identity: security "none"; or one
// that acts as anyone).
func bindRequest(ctx context.Context, method uint16, msg []byte) ([]byte, error) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return msg, nil
	}
	return bindAs(id, method, msg)
}

// bindAs is bindRequest for a caller with identity id.
func bindAs(id auth.Identity, method uint16, msg []byte) ([]byte, error) {
	if id.ActsAsAnyone() {
		return msg, nil
	}
	const op = "edge: bind credentials"
	newReq := requests[method]
	if newReq == nil {
		return nil, errs.New(errs.NotSupported, op, "method %d (%s) is not served to a client here", method, weftpb.MethodName(method))
	}
	m := newReq()
	if err := proto.Unmarshal(msg, m); err != nil {
		return nil, errs.Wrap(errs.Invalid, op, weftpb.MethodName(method), err)
	}
	changed, err := bindAll(m.ProtoReflect(), id)
	if err != nil || !changed {
		return msg, err
	}
	out, err := proto.Marshal(m)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, weftpb.MethodName(method), err)
	}
	return out, nil
}

var credsName = (*weftpb.Creds)(nil).ProtoReflect().Descriptor().FullName()

// bindAll binds every Creds message in m and reports whether one changed.
func bindAll(m protoreflect.Message, id auth.Identity) (changed bool, err error) {
	if len(m.GetUnknown()) > 0 {
		return false, errs.New(errs.NotSupported, "edge: bind credentials", "the request carries fields of %s this edge does not know (a newer client?)", m.Descriptor().FullName())
	}
	if m.Descriptor().FullName() == credsName {
		c, ok := m.Interface().(*weftpb.Creds)
		if !ok {
			return false, errs.New(errs.Invalid, "edge: bind credentials", "credentials of an unexpected type")
		}
		b := id.Bind(core.Creds{UID: c.Uid, GID: c.Gid, Groups: c.Groups})
		if b.UID == c.Uid && b.GID == c.Gid && slices.Equal(b.Groups, c.Groups) {
			return false, nil
		}
		c.Uid, c.Gid, c.Groups = b.UID, b.GID, b.Groups
		return true, nil
	}
	visit := func(sub protoreflect.Message) bool {
		ch, e := bindAll(sub, id)
		changed = changed || ch
		err = e
		return e == nil
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			ok := true
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				ok = visit(mv.Message())
				return ok
			})
			return ok
		case fd.Message() == nil:
			return true
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if !visit(l.Get(i).Message()) {
					return false
				}
			}
			return true
		default:
			return visit(v.Message())
		}
	})
	return changed, err
}
