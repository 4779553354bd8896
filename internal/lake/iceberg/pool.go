package iceberg

import (
	"math/bits"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// pagePool is the allocator of the buffers a Parquet reader decompresses
// and decodes pages into. A merge's scan opens every data file of the
// table and each column chunk reader allocates its own buffers: recycled
// here when the reader is closed, rather than left to the garbage
// collector, which otherwise costs as much as decompressing.
var pagePool = newPoolAllocator()

// poolAllocator is a memory.Allocator that keeps freed buffers of 4 KiB to
// 16 MiB for reuse, by power-of-two size class. Buffers are zeroed when
// handed out, as Go's allocator hands them out.
type poolAllocator struct {
	classes [poolMaxShift - poolMinShift + 1]sync.Pool
}

const (
	poolMinShift = 12 // 4 KiB
	poolMaxShift = 24 // 16 MiB
)

func newPoolAllocator() *poolAllocator { return &poolAllocator{} }

// poolClass returns the size class of a buffer of size bytes and the
// class's size; -1 for a size the pool leaves to Go's allocator (below
// 1 KiB or above 16 MiB).
func poolClass(size int) (int, int) {
	if size < 1<<(poolMinShift-2) || size > 1<<poolMaxShift {
		return -1, size
	}
	shift := max(poolMinShift, bits.Len(uint(size-1)))
	return shift - poolMinShift, 1 << shift
}

func (a *poolAllocator) Allocate(size int) []byte {
	c, n := poolClass(size)
	if c < 0 {
		return memory.DefaultAllocator.Allocate(size)
	}
	if p, ok := a.classes[c].Get().(*[]byte); ok {
		b := (*p)[:size]
		clear(b)
		return b
	}
	return memory.DefaultAllocator.Allocate(n)[:size]
}

func (a *poolAllocator) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size]
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *poolAllocator) Free(b []byte) {
	c, n := poolClass(cap(b))
	if c < 0 || cap(b) != n {
		return // not one of the pool's
	}
	b = b[:n]
	a.classes[c].Put(&b)
}

var _ memory.Allocator = (*poolAllocator)(nil)
