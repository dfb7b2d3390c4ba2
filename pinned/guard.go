package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The guards a shared pool needs, off by default: ZeroOnFree scrubs a buffer as it is freed, so
// that no later user of its memory reads what it held, and Quota caps the live bytes of a pool
// (one pool per tenant). With both off, Alloc and Free test one field; with either on they take
// the paths below.
//
// The scrub runs after the buffer is known to be a whole live buffer (the heap's lookup) and
// before the heap takes it back, so that a refused Free (a sub-slice, a slice of Go memory, a
// buffer freed already) clears nothing, and no other Alloc can be handed the memory before it
// is clear. Two goroutines freeing the same buffer at once are a double free the heap reports
// to one of them; the other may have cleared the buffer after it was handed out again, which
// loses that new owner's data but shows it to no one. A buffer a CUDA stream may still use
// (stream.go) is scrubbed, and leaves the quota, only once its streams have passed its free
// (giveBack with held set): scrubbing it at Free would be undone by a copy landing after.
//
// The quota counts the bytes asked for, in one atomic counter shared by the pool's goroutines:
// an Alloc adds its size and backs off when the sum passes the quota, so concurrent Allocs
// never take the pool beyond it.

// allocGuarded is Alloc with a quota, allocation sites, or both (ZeroOnFree needs nothing here).
func (p *Pool) allocGuarded(n int, alignment uintptr) ([]byte, error) {
	var b []byte
	var err error
	if p.quota > 0 {
		b, err = p.allocQuota(n, alignment)
	} else {
		b, err = p.alloc(n, alignment, false)
	}
	if err == nil && p.sites != nil {
		// Frames: runtime.Callers, record, allocGuarded, alloc, Alloc or AllocAligned, and
		// then the caller, which is the first frame kept.
		p.sites.record(mem.Addr(b), uintptr(n), 5)
	}
	if err == nil && p.trace != nil {
		var g uint64
		if p.traceG {
			g = goroutineID()
		}
		p.trace.Alloc(mem.Addr(b), uint64(n), uint64(alignment), g)
	}
	return b, err
}

// allocQuota is Alloc under a quota.
func (p *Pool) allocQuota(n int, alignment uintptr) ([]byte, error) {
	if used := p.used.Add(int64(n)); used > p.quota {
		p.used.Add(-int64(n))
		return nil, fmt.Errorf("%w: %d bytes asked with %d of %d in use", ErrQuota, n, used-int64(n), p.quota)
	}
	b, err := p.alloc(n, alignment, false)
	if err != nil {
		p.used.Add(-int64(n))
	}
	return b, err
}

// freeGuarded is Free (FreeAsync on the stream of l when l is not nil) with a scrub, a quota,
// sites, a trace, or several.
func (p *Pool) freeGuarded(addr, n uintptr, l *streamList) error {
	if p.zeroOnFree {
		size, err := p.g.Size(addr)
		if err == nil && size != n {
			return fmt.Errorf("%w: %d bytes of a buffer of %d", ErrSubSlice, n, size)
		}
		if err != nil {
			if p.released.Load() {
				return fmt.Errorf("%w: %w", ErrClosed, err)
			}
			return wrapError(err, ErrNotOwned)
		}
	}
	return p.freeRecorded(addr, n, l)
}

// freeRecorded frees the block at addr (FreeAsync on the stream of l when l is not nil) and forgets
// its allocation site and trace record, under the locks of both (lock order: the site table's
// shard, then the trace), so that an Alloc handed the same memory meanwhile is recorded after
// the free.
func (p *Pool) freeRecorded(addr, n uintptr, l *streamList) error {
	var sh *siteShard
	if p.sites != nil {
		sh = p.sites.shard(addr)
		sh.mu.Lock()
		defer sh.mu.Unlock()
	}
	if p.trace != nil {
		p.trace.Lock()
		defer p.trace.Unlock()
	}
	var err error
	if l != nil {
		err = p.order.deferFree(addr, n, l)
	} else {
		err = p.giveBack(addr, n, false, nil)
	}
	if err != nil {
		return err
	}
	if sh != nil {
		delete(sh.m, addr)
	}
	if p.trace != nil {
		p.trace.FreeLocked(addr)
	}
	return nil
}

// giveBack hands the buffer at addr of n bytes back to the heap, held (its streams have passed
// it) or not, with what the guards do then: the scrub first, the quota after. A buffer found
// held when held is false is one a stream may still use: it is deferred instead (see
// stream.go), and scrubbed when the stream has passed it.
func (p *Pool) giveBack(addr, n uintptr, held bool, on *heap.Heap) error {
	if !held && p.order != nil && p.g.Held(addr) {
		return p.order.deferFree(addr, n, nil)
	}
	if p.zeroOnFree {
		clear(mem.Bytes(addr, n))
	}
	var err error
	if held {
		if on == nil || !on.TryFreeHeld(addr, n) {
			err = wrapError(p.freeSlow(addr, n, true), ErrNotOwned)
		}
	} else {
		err = p.free(mem.Bytes(addr, n), false)
	}
	if !held && errors.Is(err, heap.ErrHeld) {
		return p.order.deferFree(addr, n, nil) // held since the check: a stream's copy raced the free
	}
	if err == nil && p.quota > 0 {
		p.used.Add(-int64(n))
	}
	return err
}
