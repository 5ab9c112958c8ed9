// Package store is weft's storage server: it keeps chunks of file data,
// named by (ino, index), in RAM or on disk, checks a CRC32C (Castagnoli) per
// block of every chunk on read, and serves the store methods of the wire
// protocol (proto/store.proto, methods 100-107).
//
// The Server validates requests, takes the locks and counts metrics; a
// Backend holds the bytes. Both backends share the block arithmetic of one
// change (crc.go), so a write, a shrink and an extension are computed once.
//
// # Locking
//
// Every chunk operation holds its inode's stripe of ino locks shared and its
// chunk's stripe of chunk locks (shared to read, exclusive to change).
// DeleteChunks holds the inode's stripe exclusively, so it never races with
// a write creating a chunk of the same inode. Backends rely on these locks:
// they never see two concurrent changes of one chunk.
//
// # Disk format
//
// Chunk (ino, index) lives in Dir/chunks/FF/IIIIIIIIIIIIIIII/XXXXXXXXXXXXXXXX,
// where FF is one byte of a hash of ino (256 fan-out directories, made on
// first use, so that inode numbers, whose high bits name a meta server, spread
// evenly), I the ino and X the index, both 16 lower-case hex digits. One
// directory per inode makes DeleteChunks a directory listing; it removes the
// inode's directory when it empties it. Dir/LOCK is flock'ed while a server
// has the directory open. Dir/FORMAT, written when the store formats the
// directory, names the format, the store's id and whether it is complete
// (marker.go; an incomplete store serves no reads, complete.go). A chunk
// file is:
//
//	offset 0     header page (4 KiB):
//	  0    magic "WEFTCHNK", format version u32 = 2, block size u32,
//	       table entries u32, data offset u32, CRC32C of these 24 bytes
//	  512  state slot 0, 1024 state slot 1, each: size u64, version u64,
//	       CRC32C of those 16 bytes (20 bytes; the rest of the page unused)
//	offset 4096  checksum table: one 8-byte entry per block (two u32 slots)
//	data offset  the chunk's bytes (4096 + table rounded up to 4 KiB)
//
// All integers are little-endian. A slot holds the chunk's state: its
// logical size and its version, which every change (write, truncate) raises
// by one; slot 0 holds even versions, slot 1 odd ones, and the valid slot
// with the higher version is the state. A new chunk has {size 0, version 0}
// in slot 0, so every chunk that holds bytes has version >= 1. The two
// slots sit in different 512-byte sectors: a write that a crash tears
// damages only the slot being written, and the other still holds the state
// before the change. The file may be longer than dataOff + size (bytes of a
// change that crashed; the next change cuts them), never shorter: a shorter
// file lost data (a cut file, a failing disk) and every read of the chunk is
// errs.Lost, so that the client reads another replica instead of zeros;
// writes and truncates of it fail so too, while a truncate to 0 or
// DeleteChunks removes it, so that repair can write it anew.
// A chunk file of format 1 (whose size was the file's length) is refused
// with errs.Corrupt naming the format.
//
// A block's CRC covers the block's bytes within the chunk, so the last
// block's CRC covers only its partial length. Gaps are file holes and read
// as zeros; their CRCs are those of zeros. With 64 KiB blocks and 64 MiB
// chunks the table is 8 KiB, written sparsely. A new chunk file is written
// as NAME.tmp (header, then extended to the data offset) and renamed into
// place, so a file under its final name always has a valid header;
// leftover .tmp files are removed at Open.
//
// # Update order (crash safety)
//
// A block is valid when its CRC equals either slot of its table entry. Every
// change of a chunk (write, truncate) is applied in four steps, per block it
// touches:
//
//  1. write the entry {CRC of the block's current bytes, CRC of its new bytes};
//  2. write the data (pwrite, or ftruncate for a truncate);
//  3. write the state {new size, version + 1} into the slot of the new version;
//  4. write the entry {new CRC, new CRC}.
//
// A shrink swaps steps 2 and 3: its size goes down before the ftruncate, so
// the recorded size never exceeds the file's length and a crash never makes
// a chunk look lost. A growth records its size after the data: a crash in
// between leaves the old size, which hides the new bytes; the next change
// cuts them off before it runs (so a gap it leaves reads zeros). None of the
// steps is fsync'ed on its own: the state costs one small pwrite per change.
//
// A crash (kill -9 or power loss) before step 2 leaves the old bytes, valid by
// the first slot; after step 2 the new bytes, valid by the second. A block that
// step 2 tore (part old, part new) matches neither and reads as errs.Corrupt,
// never as data. With sync, the file is fdatasync'ed after step 4 (and its
// directory entries fsync'ed if it was created since the last sync) before the
// reply, so an acknowledged synced write survives kill -9 and power loss.
// Without sync the write is only in the page cache: it survives kill -9 but
// not power loss until SyncChunks, which fdatasyncs every chunk file of the
// inode written since its last sync (several at a time). A write with
// write_behind also starts the device writing its bytes (sync_file_range),
// which promises nothing but leaves less for that SyncChunks to wait for.
//
// Because step 1 is not fsync'ed before step 2, after a power loss the disk
// may hold new data with an old entry: that block reads as Corrupt too; and
// it may hold the state of a growth that was not synced without the growth,
// which reads as errs.Lost (only for changes not yet synced). What
// a crash can damage is therefore limited to the blocks touched by changes in
// flight (unacknowledged), including bytes of those blocks that the change
// itself did not modify. A partial write into a block that is already corrupt
// fails with errs.Corrupt (its untouched bytes cannot be vouched for); a write
// covering the whole block, a truncate below it or a delete heals it.
//
// # Failures of the disk
//
// The disk backend does all its file work through an FS (fsys.go; the OS's
// unless Config.FS says otherwise), so that tests inject ENOSPC, EIO and
// short writes at every call. A full disk (ENOSPC, EDQUOT) is errs.NoSpace,
// which the client's mount reports as ENOSPC; other failures are errs.IO.
// A change that fails leaves what a read sees as it was, or a block it tore
// that reads as errs.Corrupt: a growth's new bytes stay hidden until its
// state is written; a shrink whose ftruncate fails puts its old size back;
// only an overwrite within the size may leave blocks it wrote whole. A
// failure of the last step (the table's {new, new}) is not a failure: the
// state and the entries' second slots already vouch for the change.
//
// # Scrub
//
// Scrub (scrub.go) reads every chunk back in pieces of 4 MiB, each under the
// chunk's read lock, at a bounded rate, and reports the chunks that fail a
// block's CRC (errs.Corrupt), are shorter than their recorded size
// (errs.Lost) or cannot be read (errs.IO); weft_store_scrub_bad_chunks_total
// counts them. Rewriting them from a good replica is repair's work.
//
// # Mem backend
//
// The mem backend (the Network RamDisk) keeps each chunk as 64 KiB blocks with
// one CRC each, checked on read, and admits a change only if the bytes of all
// chunks stay within MemLimit; a refused change alters nothing.
package store
