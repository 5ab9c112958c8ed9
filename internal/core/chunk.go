package core

// ChunkSpan is the part of one chunk that a byte range of a file covers.
type ChunkSpan struct {
	Index  uint64 // chunk number within the file
	Offset int64  // offset within the chunk
	Len    int64  // bytes within the chunk
	FileOf int64  // offset of the span's first byte within the file
}

// Spans splits the file range [off, off+n) into per-chunk spans for chunks of
// chunkSize bytes.
func Spans(off, n, chunkSize int64) []ChunkSpan {
	var spans []ChunkSpan
	for n > 0 {
		idx := off / chunkSize
		in := off % chunkSize
		l := min(chunkSize-in, n)
		spans = append(spans, ChunkSpan{Index: uint64(idx), Offset: in, Len: l, FileOf: off})
		off += l
		n -= l
	}
	return spans
}

// ChunkCount returns how many chunks hold a file of size bytes.
func ChunkCount(size uint64, chunkSize int64) uint64 {
	return (size + uint64(chunkSize) - 1) / uint64(chunkSize)
}
