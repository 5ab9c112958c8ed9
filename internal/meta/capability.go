package meta

import (
	"context"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Capabilities (internal/auth; docs/design.md "Security"). With
// Config.Capabilities set, open, create and lookup replies carry a
// capability for the file's chunks, minted with this server's key: rights
// by the open mode (lookup: read, if the caller may read), the file's
// generation, the caller's uid as holder. A change that can take access
// away raises the file's generation in its own batch (cap_generation in
// the record) and, once committed, this server tells every store, which
// then refuses the older capabilities:
//
//   - chmod that clears a permission bit (adding bits takes nothing away,
//     so a chmod that only adds does not revoke);
//   - chown and chgrp;
//   - a truncate that shrinks the file, O_TRUNC included;
//   - setting or removing a POSIX ACL (system.posix_acl_*; weft refuses
//     the system namespace today, so this waits for ACL support).
//
// An unlink does not revoke: an open file whose last name goes stays usable
// until its last close (POSIX), inode numbers are never reused, and the
// reclaimer deletes the chunks once the file is closed everywhere.
//
// A store that missed a revocation (down, or the push failed through its
// retries) accepts an old capability until it expires: capabilities live
// auth.DefaultLifetime (2 minutes), at most auth.MaxLifetime.

// revokeTimeout bounds the push of a revocation to one store before the
// operation that caused it answers; a store that did not take it is tried
// again in the background until the revoked capabilities have expired.
const revokeTimeout = 2 * time.Second

// openRights are the rights an open with flags grants.
func openRights(flags uint32) auth.Rights {
	switch flags & oAccMode {
	case oWrOnly:
		return auth.Write
	case oRdWr:
		return auth.Read | auth.Write
	}
	if flags&oTrunc != 0 {
		return auth.Read | auth.Write
	}
	return auth.Read
}

// grant is a capability to mint once the operation's txn is over (a txn
// may run again; minting costs a MAC).
type grant struct {
	ino    core.Ino
	gen    uint64
	rights auth.Rights
	ok     bool
}

// grantFor notes that the caller gets rights over n's chunks, if n is a
// regular file.
func grantFor(n *node, rights auth.Rights) grant {
	if !core.IsRegular(n.attr.Mode) {
		return grant{}
	}
	return grant{ino: n.ino, gen: n.attr.CapGeneration, rights: rights, ok: true}
}

// lookupGrant is what a lookup grants: read, if c may read n.
func (s *Server) lookupGrant(c core.Creds, n *node) grant {
	if s.cfg.Capabilities == nil || !allowed(c, n.attr, mayRead) {
		return grant{}
	}
	return grantFor(n, auth.Read)
}

// mint returns g's capability for uid, or nil with capabilities off.
func (s *Server) mint(g grant, uid uint32) []byte {
	if s.cfg.Capabilities == nil || !g.ok {
		return nil
	}
	return s.cfg.Capabilities.File(uint64(g.ino), g.gen, g.rights, uid)
}

// reclaimCapability lets the reclaimer delete and cut ino's chunks. Its
// generation is the highest: the file's revocations are for clients.
func (s *Server) reclaimCapability(ino core.Ino) []byte {
	return s.cfg.Capabilities.Service(uint64(ino), auth.Delete)
}

// capState is what a change may take away access by.
type capState struct {
	mode, uid, gid uint32
	size           uint64
}

func capStateOf(r *weftpb.InodeRecord) capState {
	return capState{mode: r.Mode, uid: r.Uid, gid: r.Gid, size: r.Size}
}

// revokeIfNarrowed raises n's generation if its change from old can take
// access away (see above) and notes the revocation for the stores.
func (t *txn) revokeIfNarrowed(n *node, old capState) {
	r := n.attr
	switch {
	case old.mode&core.ModePerm&^r.Mode != 0, old.uid != r.Uid, old.gid != r.Gid, r.Size < old.size:
		t.revoke(n)
	}
}

// revoke raises n's generation (a regular file's), in the batch the caller
// writes with putNode.
func (t *txn) revoke(n *node) {
	if !core.IsRegular(n.attr.Mode) {
		return
	}
	n.attr.CapGeneration++
	t.revoked = append(t.revoked, &weftpb.Revocation{Ino: uint64(n.ino), Generation: n.attr.CapGeneration, RevokedAtNs: t.now})
}

// pushRevocations tells every store, each within revokeTimeout; what a
// store did not take is retried in the background (retryRevocations). A
// store whose push failed within revokeSuspectFor is not waited for: a
// chmod -R with a stopped store would otherwise wait revokeTimeout per file.
func (s *Server) pushRevocations(revs []*weftpb.Revocation) {
	r := &s.reclaim
	if len(revs) == 0 || s.cfg.Capabilities == nil || len(r.stores) == 0 {
		return
	}
	req := &weftpb.RevokeCapabilitiesRequest{Revocations: revs}
	var wg sync.WaitGroup
	for i := range r.stores {
		wg.Go(func() {
			var err error
			if time.Since(time.Unix(0, r.revokeFailed[i].Load())) < revokeSuspectFor {
				err = errs.New(errs.Unavailable, "revoke capabilities", "store failed lately")
			} else if err = s.revokeOn(i, req); err != nil {
				r.revokeFailed[i].Store(time.Now().UnixNano())
			}
			if err != nil {
				select {
				case r.revokeRetry <- storeRevocation{store: i, req: req, at: time.Now()}:
				default:
					s.log.Warn("meta: too many revocations pending; the store accepts the revoked capabilities until they expire",
						"store", r.stores[i].Addr(), "err", err)
				}
			}
		})
	}
	wg.Wait()
}

// storeRevocation is a revocation store did not take yet.
type storeRevocation struct {
	store int
	req   *weftpb.RevokeCapabilitiesRequest
	at    time.Time
}

const (
	// maxPendingRevocations bounds the revocations waiting for stores.
	maxPendingRevocations = 4096
	// revokeRetryEvery is how often they are tried again.
	revokeRetryEvery = time.Second
	// revokeSuspectFor is how long a store whose push failed gets its
	// revocations from the background only.
	revokeSuspectFor = 10 * time.Second
)

func (s *Server) revokeOn(i int, req *weftpb.RevokeCapabilitiesRequest) error {
	ctx, cancel := context.WithTimeout(s.reclaim.ctx, revokeTimeout)
	defer cancel()
	return s.reclaim.stores[i].Call(ctx, weftpb.MethodRevokeCapabilities, req, &weftpb.RevokeCapabilitiesReply{})
}

// retryRevocations sends the revocations stores missed again, every
// revokeRetryEvery, until each store takes them or the capabilities they
// revoke have expired anyway (auth.MaxLifetime); a store that fails one is
// not tried again in that round.
func (s *Server) retryRevocations() {
	r := &s.reclaim
	t := time.NewTicker(revokeRetryEvery)
	defer t.Stop()
	var pending []storeRevocation
	for {
		select {
		case <-r.ctx.Done():
			return
		case x := <-r.revokeRetry:
			if len(pending) < maxPendingRevocations {
				pending = append(pending, x)
			}
			continue
		case <-t.C:
		}
		down := map[int]bool{}
		kept := pending[:0]
		for _, x := range pending {
			switch {
			case time.Since(x.at) > auth.MaxLifetime:
			case down[x.store]:
				kept = append(kept, x)
			default:
				if err := s.revokeOn(x.store, x.req); err != nil {
					down[x.store] = true
					kept = append(kept, x)
				} else {
					r.revokeFailed[x.store].Store(0)
				}
			}
		}
		pending = kept
	}
}

// GetCapability mints a fresh capability after a store refused one (it
// expired, or a revocation voided it). Granted to root, to the owner (as
// an NFS server lets the owner write a file it opened whatever the mode:
// a fchmod after open must not break the writer), and to a caller the
// mode bits allow.
func (s *Server) GetCapability(ctx context.Context, req *weftpb.GetCapabilityRequest) (*weftpb.GetCapabilityReply, error) {
	const op = "get capability"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	rights := auth.Rights(req.GetRights())
	if rights == 0 || rights&^(auth.Read|auth.Write) != 0 {
		return nil, errs.New(errs.Invalid, op, "rights %#x: want read, write or both", req.GetRights())
	}
	if s.cfg.Capabilities == nil {
		return &weftpb.GetCapabilityReply{}, nil
	}
	var g grant
	err = s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		if !core.IsRegular(n.attr.Mode) {
			return errs.New(errs.Invalid, op, "inode %d is not a regular file", n.ino)
		}
		var mask uint32
		if rights&auth.Read != 0 {
			mask |= mayRead
		}
		if rights&auth.Write != 0 {
			mask |= mayWrite
		}
		if !isOwner(c, n.attr) {
			if err := checkAccess(op, c, n.attr, mask); err != nil {
				return err
			}
		}
		g = grantFor(n, rights)
		return nil
	})
	if (errs.Is(err, errs.NotExist) || errs.Is(err, errs.Stale)) && len(req.GetPrevious()) > 0 {
		return s.renewHeld(op, req, rights, c.UID, err)
	}
	if err != nil {
		return nil, err
	}
	return &weftpb.GetCapabilityReply{Capability: s.mint(g, c.UID)}, nil
}

// renewHeld renews the capability of a file unlinked while open (its held
// reclaim record is here) for the holder of the previous one, at the
// generation the file had when unlinked; else it returns notFound.
func (s *Server) renewHeld(op string, req *weftpb.GetCapabilityRequest, rights auth.Rights, uid uint32, notFound error) (*weftpb.GetCapabilityReply, error) {
	ino := core.Ino(req.GetNode().GetIno())
	var held *weftpb.ReclaimRecord
	if err := s.scanReclaimsOf(ino, func(_ []byte, rec *weftpb.ReclaimRecord) {
		if rec.Held {
			held = rec
		}
	}); err != nil {
		return nil, err
	}
	if held == nil {
		return nil, notFound
	}
	tok, err := s.cfg.Capabilities.Renew(req.GetPrevious(), uint64(ino), held.CapGeneration, rights, uid)
	if err != nil {
		return nil, errs.Wrap(errs.Permission, op, "", err)
	}
	return &weftpb.GetCapabilityReply{Capability: tok}, nil
}
