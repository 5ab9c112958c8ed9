package auth

import (
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Which roles may call which methods (docs/wire.md, "Who may call what").
// Servers check it on every request, before the handler runs: a verified
// certificate says who the caller is, this table what it may do.
//
//   - meta-to-meta methods (40-59): meta servers, and administrators,
//     whose fsck --repair locks and rewrites records as a meta server does;
//   - store-internal methods (ListChunks, MarkStoreComplete,
//     RevokeCapabilities) and raw key reads (Scan): meta servers, stores and administrators,
//     never a client, which would otherwise list other users' chunks or
//     void their capabilities;
//   - everything else (the file system's methods, chunk reads, writes and
//     deletes, locks, status): every role; the meta server then checks the
//     request's credentials against the certificate (credsOf) and the mode
//     bits, and a store the capability each chunk request carries. A
//     client drops chunks (DeleteChunks) only of a file it removed while
//     open, under that file's write capability: a writer could cut it
//     anyway.
//
// Methods the table does not name are open to every role, so that a new
// client method works without an entry here; a new internal method must be
// added.
var internalMethods = map[uint16][]Role{
	pb.MethodScan:              {RoleMeta, RoleAdmin},
	pb.MethodListChunks:        {RoleMeta, RoleStore, RoleAdmin},
	pb.MethodMarkStoreComplete: {RoleStore, RoleAdmin},
	// Revocations come from the meta servers (and an administrator's
	// tools); a client could otherwise void other users' capabilities.
	pb.MethodRevokeCapabilities: {RoleMeta, RoleAdmin},
	// weft find: a client method (the meta server answers with what the
	// request's credentials may list); stores never search.
	pb.MethodFind: {RoleClient, RoleMeta, RoleAdmin, RoleEdge},
}

// peerMethods is the range of meta-to-meta methods.
const peerMethodsFirst, peerMethodsLast = 40, 59

// Allowed reports whether role may call method.
func Allowed(role Role, method uint16) bool {
	if method >= peerMethodsFirst && method <= peerMethodsLast {
		return role == RoleMeta || role == RoleAdmin
	}
	roles, ok := internalMethods[method]
	if !ok {
		return role.Valid()
	}
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}

// Authorize is rpc's ServerOptions.Authorize: it refuses, with
// errs.Permission, a call its caller's role may not make.
func Authorize(method uint16, peer any) error {
	id, ok := peer.(Identity)
	if !ok {
		return errs.New(errs.Permission, "rpc "+pb.MethodName(method), "the caller has no cluster identity")
	}
	if !Allowed(id.Role, method) {
		return errs.New(errs.Permission, "rpc "+pb.MethodName(method),
			"a %s identity may not call %s (method %d)", id.Role, pb.MethodName(method), method)
	}
	return nil
}
