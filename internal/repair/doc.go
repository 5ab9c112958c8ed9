// Package repair restores every chunk to its R replicas: the ones rendezvous
// placement names (core.ChunkReplicas), each holding the chunk's newest version.
//
// A pass lists every store's chunks (ListChunks, in (ino, index) order) and
// merges the listings as sorted streams, so its memory is a page per store,
// not a table of the cluster's chunks. For each chunk it picks the newest
// version any store holds, and copies it to each placed replica that lacks
// the chunk or holds an older version (a replaced disk, a store that missed
// writes while down). With Verify it also reads every placed copy, so that a
// copy failing its checksum (errs.Corrupt) or cut short (errs.Lost) is
// rewritten too.
//
// # Races with writers
//
// A copy is a conditional replace (WriteChunkRequest.replace): it takes
// effect only if the target's version is still the one the pass listed. A
// client write that reaches the target in between changes the version, the
// replace is refused with errs.Stale, and the next pass looks again. The
// source's version is checked the same way: a read that returns another
// version than listed is dropped. A pass therefore never overwrites a write
// with older bytes.
//
// # Who runs it
//
// `weft repair` runs a pass over every store. Each store also runs passes in
// the background for the chunks placed on itself (Config.Only), rate-limited,
// and a store that knows it lost its chunks becomes complete again after a
// pass that left nothing behind.
package repair
