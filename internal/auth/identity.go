// Package auth owns weft's cluster identities: the cluster CA, the
// certificates it issues to servers, clients and administrators, the TLS
// configurations built from them, the role and uid range a verified peer
// certificate grants, and which methods each role may call.
//
// An identity's role and uids travel inside its certificate as one URI
// subject alternative name, "weft:role=client;uids=1000-1000" (format.md),
// signed by the CA like the rest of the certificate: a peer cannot claim
// more than its certificate says without the CA's key.
package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// Role is what an identity is for.
type Role string

const (
	RoleMeta   Role = "meta"   // a metadata server: calls other meta servers and the stores
	RoleStore  Role = "store"  // a storage server: calls other stores (repair)
	RoleClient Role = "client" // a mount or library client acting for the uids it names
	RoleAdmin  Role = "admin"  // the cluster's operator: fsck, gc, repair, status; acts as anyone
	// RoleEdge is an edge metadata server (weft edge): a server to its
	// site's clients, whose credentials it binds to their certificates
	// itself, and to the cluster a caller of the file system's methods
	// that acts as anyone; never a meta server's peer.
	RoleEdge Role = "edge"
)

// Valid reports whether r is one of the five roles.
func (r Role) Valid() bool {
	switch r {
	case RoleMeta, RoleStore, RoleClient, RoleAdmin, RoleEdge:
		return true
	}
	return false
}

// Server reports whether the role is a server's: one that clients accept
// at the other end of a connection.
func (r Role) Server() bool { return r == RoleMeta || r == RoleStore || r == RoleEdge }

// Range is an inclusive range of uids or gids.
type Range struct{ Min, Max uint32 }

// Contains reports whether id is in r.
func (r Range) Contains(id uint32) bool { return r.Min <= id && id <= r.Max }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// ParseRange parses "N" or "A-B" (A <= B).
func ParseRange(s string) (Range, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 32)
	if err != nil {
		return Range{}, errs.New(errs.Invalid, "parse id range", "%q: %q is not a uid", s, lo)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 32); err != nil {
			return Range{}, errs.New(errs.Invalid, "parse id range", "%q: %q is not a uid", s, hi)
		}
	}
	if a > b {
		return Range{}, errs.New(errs.Invalid, "parse id range", "%q: the range is empty", s)
	}
	return Range{uint32(a), uint32(b)}, nil
}

// Identity is what a verified certificate says its holder is.
type Identity struct {
	Role Role
	// Root, for a client, lets it act as any uid and gid, root included.
	Root bool
	// UIDs and GIDs, for a client that is not Root, are the uids and gids
	// its requests may carry.
	UIDs, GIDs Range
}

// uriScheme is the scheme of the URI SAN that carries an identity.
const uriScheme = "weft"

// String encodes the identity as its URI SAN.
func (id Identity) String() string {
	s := uriScheme + ":role=" + string(id.Role)
	if id.Role != RoleClient {
		return s
	}
	if id.Root {
		return s + ";uids=root"
	}
	s += ";uids=" + id.UIDs.String()
	if id.GIDs != id.UIDs {
		s += ";gids=" + id.GIDs.String()
	}
	return s
}

// ActsAsAnyone reports whether the identity's requests may carry any
// credentials: administrators, meta servers and edge servers (which
// forward their clients' requests, bound already) and root clients.
func (id Identity) ActsAsAnyone() bool {
	return id.Role == RoleAdmin || id.Role == RoleMeta || id.Role == RoleEdge || (id.Role == RoleClient && id.Root)
}

// Nobody is the uid and gid credentials are squashed to when they lie
// outside what the caller's certificate allows.
const Nobody = 65534

// Bind limits credentials a request claims to those the identity allows
// (docs/design.md, "Identity binds credentials"):
//
//   - administrators, meta and edge servers and root clients act as anyone;
//   - a client certificate for a uid range keeps a uid in the range and a
//     gid and groups in its gid range; a uid or gid outside becomes
//     Nobody and groups outside are dropped (root squash, as NFS does):
//     the request goes on with the rights of nobody rather than failing,
//     so that a mount whose caller is root still reads what everyone may;
//   - any other role (a store) is nobody.
func (id Identity) Bind(c core.Creds) core.Creds {
	if id.ActsAsAnyone() {
		return c
	}
	if id.Role != RoleClient {
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

// Validate checks that the identity is one a CA may issue.
func (id Identity) Validate() error {
	const op = "identity"
	if !id.Role.Valid() {
		return errs.New(errs.Invalid, op, "role %q is not meta, store, edge, client or admin", id.Role)
	}
	if id.Role != RoleClient {
		if id.Root || id.UIDs != (Range{}) || id.GIDs != (Range{}) {
			return errs.New(errs.Invalid, op, "only a client identity names uids")
		}
		return nil
	}
	if id.Root && (id.UIDs != (Range{}) || id.GIDs != (Range{})) {
		return errs.New(errs.Invalid, op, "a root client names no uid range")
	}
	if id.UIDs.Min > id.UIDs.Max || id.GIDs.Min > id.GIDs.Max {
		return errs.New(errs.Invalid, op, "empty uid or gid range")
	}
	return nil
}

// ParseIdentity decodes an identity's URI SAN. It is strict: an unknown
// key, a repeated key or a key a role does not take is an error, so that a
// certificate never means more than its issuer wrote.
func ParseIdentity(s string) (Identity, error) {
	const op = "parse identity"
	body, ok := strings.CutPrefix(s, uriScheme+":")
	if !ok {
		return Identity{}, errs.New(errs.Invalid, op, "%q does not start with %s:", s, uriScheme)
	}
	var id Identity
	seen := map[string]bool{}
	gidsSet := false
	for _, field := range strings.Split(body, ";") {
		k, v, ok := strings.Cut(field, "=")
		if !ok || seen[k] {
			return Identity{}, errs.New(errs.Invalid, op, "%q: bad or repeated field %q", s, field)
		}
		seen[k] = true
		var err error
		switch k {
		case "role":
			id.Role = Role(v)
		case "uids":
			if v == "root" {
				id.Root = true
			} else {
				id.UIDs, err = ParseRange(v)
			}
		case "gids":
			id.GIDs, err = ParseRange(v)
			gidsSet = true
		default:
			return Identity{}, errs.New(errs.Invalid, op, "%q: unknown field %q", s, k)
		}
		if err != nil {
			return Identity{}, errs.WithPath(err, op, s)
		}
	}
	if id.Role != RoleClient && (seen["uids"] || seen["gids"]) {
		return Identity{}, errs.New(errs.Invalid, op, "%q: only a client identity names uids", s)
	}
	if id.Role == RoleClient && !id.Root && !seen["uids"] {
		return Identity{}, errs.New(errs.Invalid, op, "%q: a client identity names its uids", s)
	}
	if id.Role == RoleClient && !id.Root && !gidsSet {
		id.GIDs = id.UIDs
	}
	if id.Root && gidsSet {
		return Identity{}, errs.New(errs.Invalid, op, "%q: a root client names no gid range", s)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, errs.WithPath(err, op, s)
	}
	return id, nil
}

// IdentityOf returns the identity a certificate carries: exactly one weft:
// URI SAN. The caller has verified the certificate against the cluster CA.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == uriScheme {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return Identity{}, errs.New(errs.Permission, "identity", "certificate %q carries %d weft identities, not one", cert.Subject.CommonName, len(found))
	}
	return ParseIdentity(found[0].String())
}

// identifyPeer is rpc's ServerOptions.Identify: the identity of a verified
// peer certificate chain, leaf first.
func identifyPeer(chain []*x509.Certificate) (any, error) {
	if len(chain) == 0 {
		return nil, errs.New(errs.Permission, "identity", "the peer presented no certificate")
	}
	id, err := IdentityOf(chain[0])
	if err != nil {
		return nil, err
	}
	return id, nil
}

// FromContext returns the identity of the peer whose request a handler
// serves; ok is false when the server checks none (security = "none").
func FromContext(ctx context.Context) (id Identity, ok bool) {
	id, ok = rpc.PeerIdentity(ctx).(Identity)
	return id, ok
}
