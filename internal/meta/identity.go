package meta

import (
	"context"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
)

// Nobody is the uid and gid a request's credentials are squashed to when
// they lie outside what the caller's certificate allows.
const Nobody = auth.Nobody

// bindCreds limits the credentials a request claims to those its caller's
// certificate allows (auth.Identity.Bind). Without an identity (security =
// "none") the claim is trusted, as before.
func bindCreds(ctx context.Context, c core.Creds) core.Creds {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return c
	}
	return id.Bind(c)
}
