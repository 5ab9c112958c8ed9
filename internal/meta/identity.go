package meta

import (
	"context"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
)

// Nobody is the uid and gid a request's credentials are squashed to when
// they lie outside what the caller's certificate allows.
const Nobody = 65534

// bindCreds limits the credentials a request claims to those its caller's
// certificate allows (docs/design.md, "Identity binds credentials"):
//
//   - administrators, meta servers and root clients act as anyone;
//   - a client certificate for a uid range keeps a uid in the range and a
//     gid and groups in its gid range; a uid or gid outside becomes
//     Nobody and groups outside are dropped (root squash, as NFS does):
//     the request goes on with the rights of nobody rather than failing,
//     so that a mount whose caller is root still reads what everyone may;
//   - any other role (a store) is nobody.
//
// Without an identity (security = "none") the claim is trusted, as before.
func bindCreds(ctx context.Context, c core.Creds) core.Creds {
	id, ok := auth.FromContext(ctx)
	if !ok || id.ActsAsAnyone() {
		return c
	}
	if id.Role != auth.RoleClient {
		return core.Creds{UID: Nobody, GID: Nobody}
	}
	out := core.Creds{UID: c.UID, GID: c.GID}
	if !id.UIDs.Contains(c.UID) {
		out.UID = Nobody
	}
	if !id.GIDs.Contains(c.GID) {
		out.GID = Nobody
	}
	for _, g := range c.Groups {
		if id.GIDs.Contains(g) {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}
