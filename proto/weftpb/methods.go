package weftpb

// Method numbers of the meta and store protocols. They are part of the wire
// format: add, never renumber. Numbers 1-99 are the meta server's, 100-199 the
// store server's, 200+ callbacks from a server to a client.
const (
	MethodLookup      = 1
	MethodGetAttr     = 2
	MethodSetAttr     = 3
	MethodCreate      = 4
	MethodMkdir       = 5
	MethodSymlink     = 6
	MethodReadlink    = 7
	MethodUnlink      = 8
	MethodRmdir       = 9
	MethodRename      = 10
	MethodLink        = 11
	MethodReadDir     = 12
	MethodOpen        = 13
	MethodCommit      = 14
	MethodAccess      = 15
	MethodStatFS      = 16
	MethodGetXattr    = 17
	MethodSetXattr    = 18
	MethodListXattr   = 19
	MethodRemoveXattr = 20
	MethodStatus      = 21 // weft status: what a meta server holds
	// 30-39: byte-range and flock locks (lock.proto); 40-59: meta server to
	// meta server calls (GIGA+ splits, cross-server operations).

	MethodWriteChunk    = 100
	MethodReadChunk     = 101
	MethodTruncateChunk = 102
	MethodDeleteChunks  = 103
	MethodSyncChunks    = 104
	MethodStoreStatFS   = 105
)

var methodNames = map[uint16]string{
	MethodLookup: "lookup", MethodGetAttr: "getattr", MethodSetAttr: "setattr",
	MethodCreate: "create", MethodMkdir: "mkdir", MethodSymlink: "symlink",
	MethodReadlink: "readlink", MethodUnlink: "unlink", MethodRmdir: "rmdir",
	MethodRename: "rename", MethodLink: "link", MethodReadDir: "readdir",
	MethodOpen: "open", MethodCommit: "commit", MethodAccess: "access",
	MethodStatFS: "statfs", MethodGetXattr: "getxattr", MethodSetXattr: "setxattr",
	MethodListXattr: "listxattr", MethodRemoveXattr: "removexattr", MethodStatus: "status",
	MethodWriteChunk: "write_chunk", MethodReadChunk: "read_chunk",
	MethodTruncateChunk: "truncate_chunk", MethodDeleteChunks: "delete_chunks",
	MethodSyncChunks: "sync_chunks", MethodStoreStatFS: "store_statfs",
}

// MethodName returns a method's name for logs and metric labels.
func MethodName(m uint16) string {
	if n, ok := methodNames[m]; ok {
		return n
	}
	return "unknown"
}
