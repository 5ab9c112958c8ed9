// Package erasure owns the erasure-coded layout of file data: which store
// holds which unit of a stripe, how a chunk index maps to a stripe and a
// position in it, and the Reed-Solomon parity over a stripe's units
// (github.com/klauspost/reedsolomon). The client writes and reads with it;
// repair rebuilds lost units with it.
//
// # Layout
//
// With scheme k+m, chunks k·s … k·s+k-1 of a file (its data units) form
// stripe s, together with m parity units. The k+m units of a stripe sit on
// k+m distinct stores, chosen by rendezvous hashing of (ino, stripe) over
// the store list (core.ChunkReplicas): position p of the stripe is on the
// p-th store it names. Data unit p is the file's chunk k·s+p, stored under
// its own chunk index, so the meta server's reclaim (drop the chunks from
// index i, cut the chunk holding the new end) works on data units as it
// does for replicas. Parity unit j is stored under index ParityBase+2s·m+j (its
// stale mark under ParityBase+2s·m+m+j, MarkIndex),
// above every data index: a store's "delete from index i" with 0 < i <
// ParityBase leaves parity units alone, and a client that shrinks a file
// rewrites the parity of the stripe holding the new end and drops the
// parity of the stripes past it (ParityIndex(s, 0) onward).
//
// # Parity
//
// Parity is bytewise: byte x of a parity unit depends only on byte x of the
// stripe's k data units, each read as zeros past its end (a hole, a short
// chunk). So a write of bytes [a, b) of one data unit changes bytes [a, b)
// of each parity unit and nothing else, and the parity of a range can be
// recomputed from the data units' bytes in that range alone
// (Codec.ParityRange). Any k of the k+m units' bytes in a range give back
// the others' (Codec.Reconstruct).
package erasure
