package fsck

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestOrphanCandsKeepParity: the parity units of a live erasure-coded file
// sit above every data index; gc must not take them for chunks past the
// file's end. A dead inode's parity goes with its data.
func TestOrphanCandsKeepParity(t *testing.T) {
	info := func(ino core.Ino, index uint64) *weftpb.ChunkInfo {
		return &weftpb.ChunkInfo{Chunk: &weftpb.ChunkID{Ino: uint64(ino), Index: index}}
	}
	const live, dead = core.Ino(10), core.Ino(11)
	listed := []map[core.Ino][]*weftpb.ChunkInfo{{
		live: {info(live, 0), info(live, 5), info(live, erasure.ParityBase)},
		dead: {info(dead, 0), info(dead, erasure.ParityBase)},
	}}
	owners := map[core.Ino]chunkOwner{live: {size: 100}}
	cands := orphanCands(listed, owners, 64<<10)
	got := map[core.Ino][]uint64{}
	for _, c := range cands {
		for _, ci := range c.infos {
			got[c.ino] = append(got[c.ino], ci.GetChunk().GetIndex())
		}
	}
	if len(got[live]) != 1 || got[live][0] != 5 {
		t.Errorf("live file: candidates %v, want only chunk 5 (past its end), never its parity", got[live])
	}
	if len(got[dead]) != 2 {
		t.Errorf("dead inode: candidates %v, want its data and parity", got[dead])
	}
}
