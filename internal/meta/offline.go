package meta

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Offline is the store of a stopped meta server, opened by weft fsck to read
// and repair it without a server. Pebble's directory lock keeps a server from
// opening the store while fsck has it open, and the other way round.
type Offline struct {
	dir string
	db  *pebble.DB
	// keyOps applies KeyOps with the same checks PeerApply makes; it is a
	// Server with nothing but the database, which is all applyKeyOp uses.
	keyOps *Server
}

// OpenOffline opens the meta store in dir, which must exist: fsck never
// creates a store.
func OpenOffline(dir string) (*Offline, error) {
	const op = "open meta store"
	manifests, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, dir, err)
	}
	if len(manifests) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, errs.Wrap(errs.NotExist, op, dir, err)
		}
		return nil, errs.New(errs.NotExist, op, "%s holds no meta store", dir)
	}
	db, err := openPebble(dir, storeOptions{fs: vfs.Default, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if _, found, err := getValue(db, keyFormat); err != nil || !found {
		db.Close()
		if err == nil {
			err = errs.New(errs.Corrupt, op, "%s is not a weft meta store (no format key)", dir)
		}
		return nil, err
	}
	return &Offline{dir: dir, db: db, keyOps: &Server{db: db}}, nil
}

// Scan serves a ScanRequest from the store, as Server.Scan does.
func (o *Offline) Scan(req *weftpb.ScanRequest) (*weftpb.ScanReply, error) {
	return scanDB(o.db, req)
}

// Apply writes ops in one synced batch, as PeerApply does on a running
// server (only inode, entry and extended attribute keys, and counters).
func (o *Offline) Apply(ops []*weftpb.KeyOp) error {
	b := o.db.NewBatch()
	defer b.Close()
	for _, op := range ops {
		if err := o.keyOps.applyKeyOp(b, op); err != nil {
			return err
		}
	}
	if err := indexBatch(o.db, b, nil); err != nil {
		return err
	}
	return errs.Wrap(errs.IO, "apply", o.dir, b.Commit(pebble.Sync))
}

// Close closes the store.
func (o *Offline) Close() error {
	return errs.Wrap(errs.IO, "close meta store", o.dir, o.db.Close())
}

// IntentWrites decodes the value of an Intent record (a cross-server
// operation not yet finished everywhere) into the writes it still has to
// make, on every server it names and on its coordinator: key and value of a
// set, key and Delete of a delete (a range delete gives its start key).
// Counter merges are left out. weft fsck uses them to tell damage from work
// in progress.
func IntentWrites(val []byte) ([]*weftpb.KeyOp, error) {
	const op = "decode intent"
	in := &weftpb.Intent{}
	if err := proto.Unmarshal(val, in); err != nil {
		return nil, errs.Wrap(errs.Corrupt, op, "", err)
	}
	var ops []*weftpb.KeyOp
	for _, so := range in.Servers {
		ops = append(ops, so.Ops...)
	}
	if len(in.LocalBatch) == 0 {
		return ops, nil
	}
	if _, ok := batchrepr.ReadHeader(in.LocalBatch); !ok {
		return nil, errs.New(errs.Corrupt, op, "local batch has no header")
	}
	r := batchrepr.Read(in.LocalBatch)
	for {
		kind, key, value, ok, err := r.Next()
		if err != nil {
			return nil, errs.Wrap(errs.Corrupt, op, "local batch", err)
		}
		if !ok {
			return ops, nil
		}
		k := append([]byte(nil), key...)
		switch kind {
		case pebble.InternalKeyKindSet:
			ops = append(ops, &weftpb.KeyOp{Key: k, Value: append([]byte(nil), value...)})
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindRangeDelete:
			ops = append(ops, &weftpb.KeyOp{Key: k, Delete: true})
		}
	}
}
