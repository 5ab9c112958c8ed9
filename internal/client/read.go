package client

import (
	"context"
	"io"

	"github.com/weftfs/weft/internal/core"
)

// read fills p from off; sequential says the handle is streaming, so whole
// chunks are fetched and the next ones prefetched.
func (n *openInode) read(ctx context.Context, p []byte, off int64, sequential bool) (int, error) {
	n.mu.Lock()
	size := int64(n.mu.size)
	if off >= size {
		n.mu.Unlock()
		return 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	p = p[:want]
	if n.mu.inline {
		k := 0
		if off < int64(len(n.mu.data)) {
			k = copy(p, n.mu.data[off:])
		}
		clear(p[k:])
		n.mu.Unlock()
		return int(want), nil
	}
	spans := core.Spans(off, want, n.c.cfg.ChunkSize)
	// Own writes first: push out the dirty ranges this read overlaps.
	var wait []chan struct{}
	for _, s := range spans {
		if d := n.mu.dirty[s.Index]; d != nil {
			n.startUploadLocked(s.Index, d)
		}
		if ch := n.mu.inflight[s.Index]; ch != nil {
			wait = append(wait, ch)
		}
	}
	n.mu.Unlock()
	for _, ch := range wait {
		<-ch
	}
	n.mu.Lock()
	err := n.mu.err
	n.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for _, s := range spans {
		var data []byte
		var err error
		if sequential {
			data, err = n.readCached(ctx, s)
		} else {
			data, err = n.c.readChunk(ctx, n.ino, s.Index, s.Offset, s.Len)
		}
		if err != nil {
			return 0, err
		}
		dst := p[s.FileOf-off : s.FileOf-off+s.Len]
		k := copy(dst, data)
		clear(dst[k:]) // a hole or a chunk shorter than the file reads as zeros
	}
	return int(want), nil
}

// readCached serves span s from a whole-chunk fetch, and starts fetching the
// next ReadAhead chunks so a streaming reader finds them ready.
func (n *openInode) readCached(ctx context.Context, s core.ChunkSpan) ([]byte, error) {
	f := n.fetchChunk(s.Index)
	n.mu.Lock()
	last := core.ChunkCount(n.mu.size, n.c.cfg.ChunkSize)
	for i := s.Index + 1; i <= s.Index+uint64(n.c.cfg.ReadAhead) && i < last; i++ {
		n.startFetchLocked(i)
	}
	// Keep the window small: drop chunks behind the reader.
	for i := range n.mu.cache {
		if i < s.Index {
			delete(n.mu.cache, i)
		}
	}
	n.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		n.mu.Lock()
		if n.mu.cache[s.Index] == f {
			delete(n.mu.cache, s.Index)
		}
		n.mu.Unlock()
		return nil, f.err
	}
	if s.Offset >= int64(len(f.data)) {
		return nil, nil
	}
	return f.data[s.Offset:min(int64(len(f.data)), s.Offset+s.Len)], nil
}

func (n *openInode) fetchChunk(idx uint64) *fetch {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.startFetchLocked(idx)
}

// startFetchLocked returns the fetch of chunk idx, starting it if needed.
// Fetches run detached from any caller: a reader that gives up does not
// spoil the prefetched chunk for the next.
func (n *openInode) startFetchLocked(idx uint64) *fetch {
	if f := n.mu.cache[idx]; f != nil {
		return f
	}
	f := &fetch{done: make(chan struct{})}
	n.mu.cache[idx] = f
	go func() {
		defer close(f.done)
		ctx, cancel := context.WithTimeout(context.Background(), uploadTimeout)
		defer cancel()
		f.data, f.err = n.c.readChunk(ctx, n.ino, idx, 0, n.c.cfg.ChunkSize)
	}()
	return f
}
