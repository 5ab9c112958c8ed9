package rpc

import (
	"math/bits"
	"sync"
)

// Attachment buffers are pooled by power-of-two size class, so that moving
// file data allocates (and the runtime zeroes) nothing in the steady state.
// On the machines weft runs on, memory that goes back to the OS is also slow
// to get back (a fresh page costs a fault, in a VM a host fault too), which
// makes reuse matter more than the copy it saves.
const (
	minBufferShift = 12 // 4 KiB: smaller buffers are not worth pooling
	maxBufferShift = 26 // 64 MiB: the largest chunk
)

var bufferPools [maxBufferShift - minBufferShift + 1]sync.Pool

// bufferClass returns the pool index for a buffer of n bytes (n > 0).
func bufferClass(n int) int {
	shift := bits.Len(uint(n - 1))
	return max(shift, minBufferShift) - minBufferShift
}

// GetBuffer returns a byte slice of length n whose contents are undefined
// (not zeroed: it may hold bytes of an earlier use). The caller must
// overwrite every byte it exposes. Its capacity is n rounded up to a power of
// two, and PutBuffer takes it back.
func GetBuffer(n int) []byte {
	if n <= 0 {
		return nil
	}
	if n > 1<<maxBufferShift {
		return make([]byte, n)
	}
	c := bufferClass(n)
	if p, ok := bufferPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minBufferShift))
}

// PutBuffer returns a buffer from GetBuffer to the pool. The caller must not
// touch b (or any slice of it) afterwards. Buffers that did not come from
// GetBuffer may be passed too: those of a pooled size are kept, others
// dropped.
func PutBuffer(b []byte) {
	c := cap(b)
	if c < 1<<minBufferShift || c > 1<<maxBufferShift || c&(c-1) != 0 {
		return
	}
	b = b[:c]
	bufferPools[bufferClass(c)].Put(&b)
}
