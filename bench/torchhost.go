package main

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// torchHost is a caching host allocator written after PyTorch's CachingHostAllocator
// (aten/src/ATen/core/CachingHostAllocator.h, the pinned-memory allocator behind
// tensor.pin_memory() and non_blocking copies, with the CUDA side's event pool), the allocator a
// user of pinned memory compares pinmalloc with (issue 26):
//   - a request is rounded up to a power of two and served from the free list of that size,
//     else from a fresh block of the backing (cudaHostAlloc there; cuMemHostAlloc here on CUDA,
//     mmap + mlock without CUDA); blocks are never split nor coalesced, and go back to the
//     backing only when the cache is emptied (close);
//   - a block a stream used (recordStream) is not reused at its free: an event is recorded on
//     each such stream, taken from a pool of events created once and reused (PyTorch's
//     EventPool: no event is created or destroyed per free), and queued with the block, oldest
//     first; at the next allocation the queue is processed from the oldest, each completed
//     event going back to the pool and a block whose events have all completed to its free list,
//     and processing stops at the first event not ready (process_events: events are recorded in
//     order, so it does not look past one still pending, which keeps blocks whose later events
//     have completed out of reuse: the memory PyTorch's cache holds).
//
// Its reserved bytes over the bytes asked for are what vllm#53042 (1.92x) and sglang#37285
// (20.4 GiB asked, 32 GiB pinned) report. It is goroutine-safe, under one mutex like
// PyTorch's.
type torchHost struct {
	mu       sync.Mutex
	backing  hostBacking
	events   eventSource       // nil: no streams (the backing is not CUDA's)
	lists    map[int][]uintptr // the free blocks by size
	blocks   map[uintptr]*torchBlock
	queue    []torchEvent // events recorded at frees, oldest first
	idle     []uintptr    // the event pool: created, not recorded now
	created  int          // events created, for the tests
	reserved uint64       // bytes of every block taken from the backing
}

// torchBlock is one block of the cache.
type torchBlock struct {
	p       uintptr
	size    int // a power of two
	streams []uintptr
	pending int // events recorded at its free, not yet completed
	inUse   bool
}

// torchEvent is an event recorded at a block's free.
type torchEvent struct {
	ev  uintptr
	blk *torchBlock
}

// hostBacking is where a caching host allocator gets its blocks.
type hostBacking interface {
	get(n int) (uintptr, error)
	put(p uintptr, n int) error
}

// eventSource creates, records, queries and destroys events on streams, for blocks used on
// streams.
type eventSource interface {
	create() (ev uintptr, err error)
	record(ev, stream uintptr) error
	done(ev uintptr) (bool, error)
	wait(ev uintptr) error
	destroy(ev uintptr) error
}

// newTorchHost returns an empty cache over backing; events may be nil.
func newTorchHost(backing hostBacking, events eventSource) *torchHost {
	return &torchHost{backing: backing, events: events, lists: map[int][]uintptr{}, blocks: map[uintptr]*torchBlock{}}
}

// pow2 rounds n up to a power of two.
func pow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

func (a *torchHost) alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("torch-caching-host: alloc of %d bytes", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.processEvents(); err != nil {
		return nil, err
	}
	size := pow2(n)
	var blk *torchBlock
	if l := a.lists[size]; len(l) > 0 {
		blk = a.blocks[l[len(l)-1]]
		a.lists[size] = l[:len(l)-1]
	} else {
		p, err := a.backing.get(size)
		if err != nil {
			return nil, err
		}
		blk = &torchBlock{p: p, size: size}
		a.blocks[p] = blk
		a.reserved += uint64(size)
	}
	blk.inUse = true
	return unsafe.Slice(bytePtr(blk.p), size)[:n], nil
}

// recordStream notes that stream uses b: its free waits for the stream to pass.
func (a *torchHost) recordStream(b []byte, stream uintptr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	blk := a.blocks[uintptr(unsafe.Pointer(&b[0]))]
	if blk == nil || !blk.inUse {
		return errors.New("torch-caching-host: recordStream of a block not allocated")
	}
	for _, s := range blk.streams {
		if s == stream {
			return nil
		}
	}
	blk.streams = append(blk.streams, stream)
	return nil
}

func (a *torchHost) free(b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	blk := a.blocks[uintptr(unsafe.Pointer(&b[0]))]
	if blk == nil || !blk.inUse {
		return errors.New("torch-caching-host: free of a block not allocated")
	}
	blk.inUse = false
	if len(blk.streams) == 0 || a.events == nil {
		blk.streams = blk.streams[:0]
		a.lists[blk.size] = append(a.lists[blk.size], blk.p)
		return nil
	}
	for _, s := range blk.streams {
		ev, err := a.event()
		if err == nil {
			if err = a.events.record(ev, s); err != nil {
				a.idle = append(a.idle, ev)
			}
		}
		if err != nil {
			return err
		}
		a.queue = append(a.queue, torchEvent{ev, blk})
		blk.pending++
	}
	blk.streams = blk.streams[:0]
	return nil
}

// event takes an event from the pool, creating one when it is empty.
func (a *torchHost) event() (uintptr, error) {
	if n := len(a.idle); n > 0 {
		ev := a.idle[n-1]
		a.idle = a.idle[:n-1]
		return ev, nil
	}
	ev, err := a.events.create()
	if err == nil {
		a.created++
	}
	return ev, err
}

// processEvents takes the completed events off the queue, oldest first, back to the pool, and
// a block whose events have all completed to its free list; it stops at the first event not
// ready.
func (a *torchHost) processEvents() error {
	for len(a.queue) > 0 {
		e := a.queue[0]
		ok, err := a.events.done(e.ev)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		a.queue = a.queue[1:]
		a.idle = append(a.idle, e.ev)
		if e.blk.pending--; e.blk.pending == 0 {
			a.lists[e.blk.size] = append(a.lists[e.blk.size], e.blk.p)
		}
	}
	if len(a.queue) == 0 {
		a.queue = nil // let the backing array go
	}
	return nil
}

func (*torchHost) touch(b []byte) { b[0] = 1 }

// footprint is the bytes the cache holds from its backing.
func (a *torchHost) footprint() (held, resident uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reserved, a.reserved
}

// close empties the cache: it waits for the queued events, destroys the pool's events and gives
// every block back.
func (a *torchHost) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, e := range a.queue {
		errs = append(errs, a.events.wait(e.ev))
		a.idle = append(a.idle, e.ev)
	}
	a.queue = nil
	for _, ev := range a.idle {
		errs = append(errs, a.events.destroy(ev))
	}
	a.idle = nil
	for p, blk := range a.blocks {
		errs = append(errs, a.backing.put(p, blk.size))
		delete(a.blocks, p)
	}
	a.lists, a.reserved = map[int][]uintptr{}, 0
	return errors.Join(errs...)
}

// lockedBacking is mmap + mlock: pinned host memory without CUDA.
type lockedBacking struct{}

func (lockedBacking) get(n int) (uintptr, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return 0, fmt.Errorf("torch-caching-host: mmap of %d bytes: %w", n, err)
	}
	if err := unix.Mlock(b); err != nil {
		return 0, errors.Join(fmt.Errorf("torch-caching-host: mlock of %d bytes: %w", n, err), unix.Munmap(b))
	}
	return uintptr(unsafe.Pointer(&b[0])), nil
}

func (lockedBacking) put(p uintptr, n int) error {
	return unix.Munmap(unsafe.Slice(bytePtr(p), n))
}

// newTorchCachingHost is the PyTorch-style cache over locked memory, in the CPU suite's
// pair and serving-trace cases only: its reserved bytes over live bytes on the trace are the
// memory comparison every CPU report carries.
func newTorchCachingHost() impl {
	im := goImpl(torchName, func(int64) (allocator[[]byte], error) { return newTorchHost(lockedBacking{}, nil), nil })
	im.mixed, im.prodcons, im.churn, im.huge, im.replay = nil, nil, nil, nil, nil
	return selfLocking(im)
}
