package edge

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// Directories made under write-back. A write-back client that queues a
// mkdir queues what it makes inside the new directory too (internal/client
// writeback_dirs.go), and holds the new directory's write lease from the
// moment the mkdir is applied: a meta server grants it to the batch's
// session before the batch commits (ApplyBatchRequest.Session). Through an
// edge the upstream granted nothing (the session is the edge's, unknown
// there), so the client held no lease on the new directory once its mkdir
// was applied, while its queue still held the changes made inside it:
// another site read the directory empty after a create in it had
// returned (TestLinzTwoSitesWriteBack, TestEdgeNewDirQueueSeen). So the
// edge does what the meta server does, on both levels: before the batch
// goes upstream on deleg it grants the client write leases on the new
// directories in its own table (nobody else can know their numbers yet),
// and asks the upstream for them under wsession; once the batch is
// applied it keeps those the upstream granted as its delegated write
// leases and answers with its own grant. A reader of the new directory
// then recalls them through both levels, and the client sends its queue
// first, as for any delegated directory.

// newDirs is a batch's mkdirs whose write leases the edge granted the
// client (session) before the batch went upstream.
type newDirs struct {
	session uint64
	keys    []lease.Key
	grant   lease.Grant
	sent    time.Time
}

// newDirsBefore grants a write-back client write leases on the directories
// its batch msg makes and returns the request to send upstream (naming the
// edge's wsession, so that the upstream grants them to the edge), or msg
// and nil when there is nothing to grant.
func (u *upstream) newDirsBefore(ctx context.Context, msg []byte) ([]byte, *newDirs) {
	holder := lease.HolderOf(ctx)
	var req weftpb.ApplyBatchRequest
	if holder == nil || proto.Unmarshal(msg, &req) != nil || req.Session == 0 {
		return msg, nil
	}
	var keys []lease.Key
	for _, op := range req.Ops {
		if m := op.GetMkdir(); m != nil {
			keys = append(keys, lease.Key(m.Ino))
		}
	}
	// As the meta server: only to a session that holds its leases here
	// over this connection.
	if len(keys) == 0 || !u.grants.AcquiredOver(req.Session, holder) {
		return msg, nil
	}
	actx, cancel := context.WithTimeout(ctx, acquireWait)
	defer cancel()
	nd := &newDirs{session: req.Session, keys: keys, sent: time.Now()}
	g, err := u.grants.Acquire(actx, req.Session, holder, lease.Write, keys)
	if err != nil {
		return msg, nil
	}
	nd.grant = g
	req.Session = u.wsession
	out, err := proto.Marshal(&req)
	if err != nil {
		nd.release(u, keys)
		return msg, nil
	}
	return out, nd
}

// release gives back the client's grants on keys.
func (nd *newDirs) release(u *upstream, keys []lease.Key) {
	if len(keys) == 0 {
		return
	}
	seqs := make([]uint64, len(keys))
	for i := range seqs {
		seqs[i] = nd.grant.Seq
	}
	u.grants.Release(nd.session, keys, seqs)
}

// after keeps the upstream's grants of the batch's reply resp as the
// edge's write leases and returns the reply to give the client: its
// Leased names the new directories the client holds write leases on here,
// under the edge's grant. What the upstream did not grant (the batch
// failed, a directory another server owns, a recall already) the client
// does not hold.
func (nd *newDirs) after(u *upstream, resp []byte, err error) []byte {
	if err != nil {
		nd.release(u, nd.keys)
		return resp
	}
	var reply weftpb.ApplyBatchReply
	if proto.Unmarshal(resp, &reply) != nil {
		nd.release(u, nd.keys)
		return resp
	}
	term := time.Duration(reply.LeaseTermMs) * time.Millisecond
	trusted := nd.sent.Add(term - margin(term))
	upGranted := make(map[lease.Key]bool, len(reply.Leased))
	for _, ino := range reply.Leased {
		upGranted[lease.Key(ino)] = true
	}
	var kept, dropped []lease.Key
	u.mu.Lock()
	now := time.Now()
	for _, k := range nd.keys {
		if r, recalled := u.mu.recalled[k]; upGranted[k] && recalled && r.seq >= reply.LeaseSeq {
			// A recall overtook the reply: it recalls the client's
			// grant, which the client gives back once it has sent
			// what it queued in the directory.
			continue
		}
		// The client's grant rests on the edge's: it must outlast it.
		if !upGranted[k] || reply.LeaseSeq == 0 || !trusted.After(now.Add(nd.grant.Term)) {
			dropped = append(dropped, k)
			continue
		}
		if h := u.mu.held[k]; h == nil || h.seq < reply.LeaseSeq {
			u.mu.held[k] = &upLease{seq: reply.LeaseSeq, trusted: trusted, since: now, write: true}
		}
		kept = append(kept, k)
	}
	u.mu.Unlock()
	nd.release(u, dropped)
	for _, k := range kept {
		u.edge.dirs.add(core.Ino(k))
	}
	u.edge.metrics.writeGranted.Add(float64(len(kept)))
	reply.Leased = reply.Leased[:0]
	for _, k := range kept {
		reply.Leased = append(reply.Leased, uint64(k))
	}
	reply.LeaseSeq, reply.LeaseTermMs = 0, 0
	if len(kept) > 0 {
		reply.LeaseSeq, reply.LeaseTermMs = nd.grant.Seq, uint32(nd.grant.Term/time.Millisecond)
	}
	out, merr := proto.Marshal(&reply)
	if merr != nil {
		nd.release(u, kept)
		return resp
	}
	return out
}
