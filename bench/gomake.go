package main

import (
	"math/bits"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// goMake is make([]byte, n), freed by dropping the slice and leaving the rest to the garbage
// collector, which runs as usual (GOGC=100). Its footprint is the Go heap in use. It runs in
// the same rounds as the others (interleave), so a large block's cost includes faulting in
// the pages Go's scavenger returned while they ran (docs/bench.md).
type goMake struct{ goHeap }

func newGoMake() impl {
	im := goImpl("go-make", func(int64) (allocator[[]byte], error) {
		return &goMake{newGoHeap()}, nil
	})
	im.huge = nil   // the Go heap has no fixed capacity to fill
	im.churn = nil  // the churn cases compare pinmalloc with the C allocators
	im.larson = nil // the Go heap in use is the whole process's, the bench's own data included
	return im
}

func (*goMake) alloc(n int) ([]byte, error) { return make([]byte, n), nil }
func (*goMake) free(b []byte) error         { runtime.KeepAlive(b); return nil } // the make must happen
func (*goMake) touch(b []byte)              { b[0] = 1 }
func (*goMake) close() error                { return nil }

// goSyncPool is the usual Go buffer pool: one sync.Pool per power-of-two capacity, holding
// *[]byte so that Put does not allocate. Buffers it drops are the garbage collector's.
type goSyncPool struct {
	goHeap
	pools [64]sync.Pool
}

func newGoSyncPool() impl {
	im := goImpl("go-syncpool", func(int64) (allocator[*[]byte], error) {
		return &goSyncPool{goHeap: newGoHeap()}, nil
	})
	im.huge, im.churn, im.larson = nil, nil, nil
	return im
}

func (p *goSyncPool) alloc(n int) (*[]byte, error) {
	k := bits.Len(uint(n - 1))
	if v := p.pools[k].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b, nil
	}
	b := make([]byte, n, 1<<k)
	return &b, nil
}

func (p *goSyncPool) free(b *[]byte) error {
	runtime.KeepAlive(*b)
	p.pools[bits.Len(uint(cap(*b)-1))].Put(b)
	return nil
}

func (*goSyncPool) touch(b *[]byte) { (*b)[0] = 1 }
func (*goSyncPool) close() error    { return nil }

// goHeap reports the Go heap above what it was when the allocator was opened:
// held is the heap in use (objects, live or not yet swept, plus the unused part of in-use
// spans: HeapInuse); resident adds free heap memory not yet returned to the system.
type goHeap struct{ baseHeld, baseResident uint64 }

func newGoHeap() goHeap {
	debug.FreeOSMemory() // a GC, and the free heap of earlier cases back to the system
	h, r := goHeapBytes()
	return goHeap{h, r}
}

func (g goHeap) footprint() (held, resident uint64) {
	h, r := goHeapBytes()
	return sub0(h, g.baseHeld), sub0(r, g.baseResident)
}

// sub0 is a - b, or 0 when b is larger.
func sub0(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

var heapMetrics = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
}

// goHeapBytes reads the heap in use and the heap resident through runtime/metrics, which
// does not stop the world. It is called from one goroutine at a time.
func goHeapBytes() (held, resident uint64) {
	metrics.Read(heapMetrics)
	held = heapMetrics[0].Value.Uint64() + heapMetrics[1].Value.Uint64()
	return held, held + heapMetrics[2].Value.Uint64()
}
