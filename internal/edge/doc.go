// Package edge is the edge metadata server (Ringer's "mixed" mode, seed
// 000): a process in a remote site that its clients reach as their meta
// servers, in front of the authoritative cluster (upstream) over a slow
// link. Data still moves between clients and stores directly.
//
// Layout. The edge has one listener per upstream meta server, and writes a
// cluster file that names its listeners as the meta servers (same order)
// and the upstream's stores as the stores. So a client's GIGA+ routing,
// its WrongServer redirects and the server indices in inode numbers pass
// through unchanged: listener i forwards to upstream server i.
//
// Forwarding. Every client method is forwarded as encoded bytes (rpc raw
// calls) on one connection per upstream server, with the caller's context
// and deadline; errors come back with their kinds and messages. Writes go
// upstream synchronously: what the edge acknowledged is upstream.
//
// Caching. The edge holds read leases upstream under its own session, on
// a connection of its own (the cache connection), so that a change, even
// one the edge forwarded for its own client, recalls them like any other
// holder's. Under them it answers getattr, lookup and readdir from a cache of
// replies (keyed by the whole request, credentials included), and grants
// its clients' read leases from its own lease table (internal/lease), for
// a shorter term (Config.Term), and only while the upstream lease it
// rests on is trusted for at least that long; a lease in use is renewed
// in the background before that runs out. An upstream recall drops
// the cache at once, recalls the clients' leases on those keys and waits
// (bounded by their term) for their releases, then releases upstream. The
// client whose own forwarded change caused the recall is spared until the
// change returns (inflight.go), as a meta server spares the requester.
//
// Security. On a secured cluster the edge holds an identity of its own
// (role edge): it dials upstream with it and serves its clients with it,
// mutual TLS against the cluster's CA in the cluster's mode, with the
// meta servers' role policy. Upstream its certificate acts as anyone, so
// it binds each client request's credentials to the client's
// certificate itself (creds.go). Capabilities in replies pass through
// unchanged; the stores check them.
//
// Delegation. A client's write lease is granted on a write lease the edge
// holds upstream on a connection of its own, and the changes under it are
// forwarded there, after the edge recalled its other clients' leases
// (delegate.go). A write-back client's batches go through the edge like
// any change, so the edge itself never holds one.
package edge
