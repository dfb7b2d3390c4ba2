package pinned

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The pools whose buffers the driver copies asynchronously, for code that queues asynchronous
// work on buffers it was given: device.Heap's HtoDAsync and DtoHAsync find the pool of a host
// buffer (PoolOf) and record their stream on it (RecordStream), so that freeing the buffer
// right after the copy is safe. The pools are few (one or two per device), so PoolOf asks each
// in turn, with one lock-free lookup of the address in its arena; a pool joins at New and
// leaves when its memory is released, copying the list, so PoolOf takes no lock.

var (
	ownersMu sync.Mutex
	owners   atomic.Pointer[[]*Pool]
)

// PoolOf returns the pool whose memory holds the start of b among the pools that order the
// reuse of their buffers after CUDA streams (Device is not -1), or nil: for code that queues
// asynchronous work on a buffer it was given, which then records its stream on the buffer
// (RecordStream) so that a free of the buffer waits for the work. Go memory, and the buffers
// of pools whose memory the driver copies synchronously, have none.
func PoolOf(b []byte) *Pool {
	l := owners.Load()
	if l == nil || len(b) == 0 {
		return nil
	}
	addr := mem.Addr(b)
	for _, p := range *l {
		if _, ok := p.a.Lookup(addr); ok {
			return p
		}
	}
	return nil
}

// Device returns the ordinal of the CUDA device whose streams order the reuse of the pool's
// buffers (Options.Device), for a pool whose memory the driver copies asynchronously (the
// CUDAHost backend, or an External region of pinned memory with a driver present): FreeAsync
// and RecordStream take streams of that device. It is -1 for other pools, whose memory the
// driver copies before a copy call returns.
func (p *Pool) Device() int {
	if p.order == nil {
		return -1
	}
	return p.order.points().Ordinal()
}

// DevicePointer returns the address at which a CUDA device sees b, a live buffer of a pool with
// the CUDAHost backend or a slice of one, for kernels that read or write host memory directly.
// Other backends give an error wrapping ErrInvalidOptions; memory that is not a buffer of the
// pool (Go memory, another pool's buffer) ErrNotOwned; a buffer the caller has freed, its free
// done or still waiting for its streams or holds, ErrDoubleFree, as a second Free would; and a
// pool whose memory is released ErrClosed. Its answer is the moment's, as Live's: a free racing
// the call is the caller's business, and the pointer is the buffer's only until its free.
func (p *Pool) DevicePointer(b []byte) (cuda.DevicePtr, error) {
	c, ok := p.a.Provider().(deviceMapper)
	if !ok {
		return 0, fmt.Errorf("%w: the %s backend has no device pointers", ErrInvalidOptions, p.backend)
	}
	if _, err := p.unfreed(b); err != nil {
		return 0, err
	}
	addr := mem.Addr(b)
	ptr, err := c.DevicePointer(addr)
	if errors.Is(err, arena.ErrInvalid) { // the provider's: not committed memory, so no buffer
		return 0, fmt.Errorf("%w: %w", ErrNotOwned, err)
	}
	return ptr, wrapError(err, ErrNotOwned)
}

// own adds p to the pools PoolOf asks.
func own(p *Pool) {
	ownersMu.Lock()
	defer ownersMu.Unlock()
	var l []*Pool
	if old := owners.Load(); old != nil {
		l = slices.Clone(*old)
	}
	l = append(l, p)
	owners.Store(&l)
}

// disown takes p off the pools PoolOf asks.
func disown(p *Pool) {
	ownersMu.Lock()
	defer ownersMu.Unlock()
	if old := owners.Load(); old != nil {
		l := slices.DeleteFunc(slices.Clone(*old), func(x *Pool) bool { return x == p })
		owners.Store(&l)
	}
}
