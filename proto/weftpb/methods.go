package weftpb

// Method numbers of the meta and store protocols. They are part of the wire
// format: add, never renumber. Numbers 1-99 are the meta server's, 100-199 the
// store server's, 200+ callbacks from a server to a client.
const (
	MethodLookup         = 1
	MethodGetAttr        = 2
	MethodSetAttr        = 3
	MethodCreate         = 4
	MethodMkdir          = 5
	MethodSymlink        = 6
	MethodReadlink       = 7
	MethodUnlink         = 8
	MethodRmdir          = 9
	MethodRename         = 10
	MethodLink           = 11
	MethodReadDir        = 12
	MethodOpen           = 13
	MethodCommit         = 14
	MethodAccess         = 15
	MethodStatFS         = 16
	MethodGetXattr       = 17
	MethodSetXattr       = 18
	MethodListXattr      = 19
	MethodRemoveXattr    = 20
	MethodStatus         = 21 // weft status: what a meta server holds
	MethodScan           = 22 // weft fsck: read raw keys
	MethodReleaseReclaim = 23 // last close of an unlinked file: reclaim its chunks
	MethodGetCapability  = 24 // a fresh capability after a store refused one
	MethodFind           = 25 // weft find: one page of a server's matches
	MethodSyncMeta       = 27 // make what was acknowledged durable (async mode)
	MethodAllocInos      = 28 // write-back: inode numbers for a client to hand out
	MethodApplyBatch     = 29 // write-back: a batch of a directory's operations, atomically
	// 30-39: byte-range and flock locks (lock.proto).
	MethodSetLock        = 30
	MethodGetLock        = 31
	MethodLockKeepAlive  = 32
	MethodEndLockSession = 33
	// 40-59: meta server to meta server calls (GIGA+ splits, cross-server
	// operations).

	MethodPeerLock             = 40
	MethodPeerUnlock           = 41
	MethodPeerGet              = 42
	MethodPeerApply            = 43
	MethodPeerInstallPartition = 44
	MethodPeerSetPerm          = 45
	MethodPeerRelease          = 46
	// 60-69: leases (lease.proto). Release is a one-way message.
	MethodLeaseAcquire = 60
	MethodLeaseRelease = 61
	MethodLeaseStatus  = 62 // weft status: lease counts
	MethodLocate       = 63 // where a meta server holds a one-link file's entry (an open file renamed by another client)

	MethodWriteChunk         = 100
	MethodReadChunk          = 101
	MethodTruncateChunk      = 102
	MethodDeleteChunks       = 103
	MethodSyncChunks         = 104
	MethodStoreStatFS        = 105
	MethodListChunks         = 106 // weft gc and repair: what a store holds
	MethodMarkStoreComplete  = 107 // weft repair: a replacement store is whole again
	MethodRevokeCapabilities = 108 // meta server: a file's older capabilities are void
	MethodSyncStore          = 109 // make every chunk written so far durable
	MethodUndoWrite          = 110 // put back what a keep_old write replaced (a failed stripe write)
	MethodReleaseUndo        = 111 // one-way: drop what a keep_old write kept
	MethodLockStripe         = 112 // an erasure-coded stripe's write lock, across clients
	MethodUnlockStripe       = 113 // one-way: release it

	// 200-209: lease callbacks from a meta server to a client (one-way).
	MethodLeaseRecall = 200
)

var methodNames = map[uint16]string{
	MethodLookup: "lookup", MethodGetAttr: "getattr", MethodSetAttr: "setattr",
	MethodCreate: "create", MethodMkdir: "mkdir", MethodSymlink: "symlink",
	MethodReadlink: "readlink", MethodUnlink: "unlink", MethodRmdir: "rmdir",
	MethodRename: "rename", MethodLink: "link", MethodReadDir: "readdir",
	MethodOpen: "open", MethodCommit: "commit", MethodAccess: "access",
	MethodStatFS: "statfs", MethodGetXattr: "getxattr", MethodSetXattr: "setxattr",
	MethodListXattr: "listxattr", MethodRemoveXattr: "removexattr", MethodStatus: "status",
	MethodScan: "scan", MethodReleaseReclaim: "release_reclaim", MethodGetCapability: "get_capability", MethodSyncMeta: "sync_meta", MethodFind: "find",
	MethodAllocInos: "alloc_inos", MethodApplyBatch: "apply_batch",
	MethodSetLock: "setlock", MethodGetLock: "getlock",
	MethodLockKeepAlive: "lock_keepalive", MethodEndLockSession: "end_lock_session",
	MethodPeerLock: "peer_lock", MethodPeerUnlock: "peer_unlock", MethodPeerGet: "peer_get",
	MethodPeerApply: "peer_apply", MethodPeerInstallPartition: "peer_install_partition",
	MethodPeerSetPerm: "peer_setperm", MethodPeerRelease: "peer_release",
	MethodWriteChunk: "write_chunk", MethodReadChunk: "read_chunk",
	MethodTruncateChunk: "truncate_chunk", MethodDeleteChunks: "delete_chunks",
	MethodSyncChunks: "sync_chunks", MethodStoreStatFS: "store_statfs",
	MethodListChunks: "list_chunks", MethodMarkStoreComplete: "mark_store_complete",
	MethodRevokeCapabilities: "revoke_capabilities", MethodSyncStore: "sync_store",
	MethodUndoWrite: "undo_write", MethodReleaseUndo: "release_undo",
	MethodLockStripe: "lock_stripe", MethodUnlockStripe: "unlock_stripe",

	MethodLeaseAcquire: "lease_acquire", MethodLeaseRelease: "lease_release",
	MethodLeaseRecall: "lease_recall", MethodLeaseStatus: "lease_status", MethodLocate: "locate",
}

// MethodName returns a method's name for logs and metric labels.
func MethodName(m uint16) string {
	if n, ok := methodNames[m]; ok {
		return n
	}
	return "unknown"
}
