// Package lease is a meta server's session, lease and lock service. All of it
// is soft state, in memory only: a restart forgets it (and a grace period
// covers what clients may still believe).
//
// Sessions. A client has one session id (random, 64 bits) for all the meta
// servers it talks to; each server keeps what it knows of the session: when
// it last heard from it (every request and keepalive extends its life by
// SessionTTL), the connection recalls go to, the leases and the file locks
// it holds. A session that stays silent for SessionTTL loses its locks and
// leases. Locks and leases share sessions so that one keepalive keeps both
// and one death frees both.
//
// Leases (Ringer, seed 000). A lease is a session's right to cache what this
// server holds under a key. A key is an inode number; on this server it
// covers the entries of the directory's partition held here (and the
// attributes embedded in them) and the inode's own record here. So the
// server that answers a read about a record is the one that grants its lease
// and the one whose commits change it: recalls never cross servers, and a
// split directory has one lease per partition (its key on each partition's
// server). A read lease is shared; a write lease excludes every other
// session's lease. A lease lasts one Term from its grant (keepalives keep
// the session, not its leases: a holder that missed a recall must not be
// able to extend the lease it was asked to give back); the holder renews
// it by acquiring it again, and stops trusting it earlier, measured on its
// own clock from when it sent the request. Every grant has a sequence
// number, carried by its recalls and releases, so that a late release of
// an older grant never ends a newer one.
//
// Acquiring is synchronous and may wait (bounded by the caller's context)
// for conflicting leases to go. Releasing is a one-way message. A change
// (BeginChange: every commit that writes records under some keys) first
// recalls the read and write leases other sessions hold on its keys, through
// the holder's connection, and waits until each is released or its term
// ends; while the change runs, no new lease on its keys is granted (acquires
// wait), so that nobody can read the old state under a fresh lease and miss
// the recall. The requesting client's own session keeps its leases: it
// knows what it changes. A session that owes a release (a change recalled
// one of its leases, on any key) and asks for a read lease on a key a
// change is in progress on is refused at once rather than made to wait: it
// is likely asking from a request that its own invalidation waits for (the
// kernel holds a directory's lock for a lookup, and the invalidation of
// the recalled key's names needs it).
//
// Grace. Clients may still trust leases granted before a restart; they
// stop at most one term after they asked, which was before the restart. So
// for Grace (one term) after it starts, the service grants no write lease
// and lets no change through.
package lease
