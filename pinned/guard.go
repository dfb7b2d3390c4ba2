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
// A ZeroOnFree Free claims the buffer first (heap.Group.HoldSized: one compare-and-swap that
// checks it is a whole live buffer and marks it held), then scrubs it, then gives it back as
// a held buffer, so that a refused Free (a sub-slice, a slice of Go memory, a buffer freed
// already) clears nothing, no other Alloc can be handed the memory before it is clear, and of
// two goroutines freeing the same buffer at once only the one whose claim won touches it: the
// other's claim finds it held (or freed) and reports a double free without writing a byte, so
// it never clears memory handed out again, nor memory a closed pool released with its last
// buffer. A buffer a CUDA stream may still use (stream.go) is scrubbed, and leaves the quota,
// only once its streams have passed its free (giveBack with held set): scrubbing it at Free
// would be undone by a copy landing after. Without a scrub, a Free frees the buffer plainly (the
// fast section's free, under the site table's locks): in a pool without stream order, a Hold that
// takes the buffer after the free's look at the holds makes the heap refuse the free (ErrHeld),
// changing nothing, and the free looks at the holds again, out of those locks, and waits for the
// Release (hold.go). It must not wait under them: a last Release making an earlier free of the
// buffer (a double free racing it) takes them for that free.
//
// The quota counts the bytes asked for, in one atomic counter shared by the pool's goroutines:
// an Alloc adds its size and backs off when the sum passes the quota, so concurrent Allocs
// never take the pool beyond it. A buffer counts until the heap has it back: a deferred one
// (stream.go) until its streams have passed its free. An Alloc the quota refuses is refused
// only once nothing that may still come back could make room (quotaRoom): while buffers are
// deferred, in a shard's FreeAsync cache, or being freed by a reclaim under way (it takes them
// off the lists before it frees them), it reclaims, waiting for the reclaim under way, and
// tries again.

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
		p.traceAlloc(mem.Addr(b), uintptr(n), alignment)
	}
	return b, err
}

// allocQuota is Alloc under a quota.
func (p *Pool) allocQuota(n int, alignment uintptr) ([]byte, error) {
	// Sizes no room could serve are refused before they count: one near math.MaxInt would
	// take the sum past math.MaxInt64, to a negative one that lets other Allocs through.
	if c := p.a.Capacity(); uintptr(n) > c {
		return nil, fmt.Errorf("%w: %d bytes asked of a pool of capacity %d", ErrTooLarge, n, c)
	}
	if int64(n) > p.quota {
		return nil, fmt.Errorf("%w: %d bytes asked of a quota of %d", ErrQuota, n, p.quota)
	}
	if room, rerr := p.quotaRoom(int64(n)); !room {
		used := p.used.Load()
		if p.order == nil {
			return nil, fmt.Errorf("%w: %d bytes asked with %d of %d in use", ErrQuota, n, used, p.quota)
		}
		dn, dbytes := p.deferred()
		// Why they wait, when a reclaim could not tell (a fault, a capture): its error,
		// classified already (streamError), beside the quota's.
		qerr := fmt.Errorf("%w: %d bytes asked with %d of %d in use (%d bytes in %d buffers "+
			"wait for their streams)", ErrQuota, n, used, p.quota, dbytes, dn)
		if rerr != nil {
			qerr = errors.Join(qerr, rerr)
		}
		return nil, qerr
	}
	if afterQuotaRoom != nil {
		afterQuotaRoom()
	}
	b, err := p.alloc(n, alignment, false)
	if err != nil {
		p.used.Add(-int64(n))
	}
	return b, err
}

// quotaTries bounds the reclaims of one Alloc the quota refuses: each waits for the reclaim
// under way and takes back what the streams have passed, and a second finds what the first
// recorded an event for passed when the stream was; more only help when other goroutines free
// buffers meanwhile.
const quotaTries = 4

// quotaRoom counts n bytes more in use when the quota has room for them, and reports whether
// it had; with a refusal, the error of its last reclaim (nil if none failed), which says why
// deferred buffers still wait (ErrDeviceFault after a fault, cuda.ErrCapturing during a
// capture), the refused Alloc's to say; the next Trim or Close says it again. A refusal is
// final once no deferred buffer may come back (streamOrder.returning) and none has left the
// quota since before the sum that found no room (streamOrder.returned), or after quotaTries
// reclaims.
//
// The second condition closes a race: the sum may count deferred buffers that another
// goroutine's reclaim takes back, and finishes, before returning is asked; returning then says
// nothing waits, though the room is there now. Refusing then refused 1 Alloc in some 400 runs
// of TestFakeQuotaConcurrentFreeAsync (probe build); TestFakeQuotaRoomAfterReclaim makes the
// race happen.
func (p *Pool) quotaRoom(n int64) (bool, error) {
	var err error
	for try := 0; ; try++ {
		var back uint64
		if p.order != nil {
			back = p.order.returned.Load()
		}
		if p.used.Add(n) <= p.quota {
			return true, nil
		}
		p.used.Add(-n)
		if afterQuotaMiss != nil {
			afterQuotaMiss()
		}
		if p.order == nil || try == quotaTries {
			return false, err
		}
		if !p.order.returning() {
			if p.order.returned.Load() == back {
				return false, err
			}
			continue // buffers left the quota since the sum: sum again
		}
		// A refusal leaves its buffers deferred: its error is the refused Alloc's, and the
		// next Trim's or Close's; a room found makes it moot.
		err = p.reclaim(true) // deferred buffers the streams have passed leave the quota
	}
}

// afterHoldsLook, when set (by tests), runs in freeGuarded between its look at the holds and its
// claim (ZeroOnFree) or free of the buffer.
var afterHoldsLook func()

// afterQuotaRoom, when set (by tests), runs in allocQuota once the quota has counted the
// request, before its allocation.
var afterQuotaRoom func()

// afterQuotaMiss, when set (by tests), runs in quotaRoom between a sum that found no room and
// the question whether deferred buffers may still come back.
var afterQuotaMiss func()

// freeGuarded is Free (FreeAsync on the stream of l when l is not nil) with a scrub, a quota,
// sites, a trace, or several.
func (p *Pool) freeGuarded(addr, n uintptr, l *streamList) error {
	if l == nil { // FreeAsync asked already
		if handled, err := p.out.deferFree(addr, n, false, 0, false); handled { // held: hold.go
			return err
		}
		if afterHoldsLook != nil {
			afterHoldsLook()
		}
	}
	if p.order == nil && p.sharer != nil {
		// Shared, and its Sharer does not know it (the free asked it first): freed.
		if done, err := p.freeUnknownShared(addr, n); done {
			return err
		}
	}
	claimed := false
	if l == nil && p.zeroOnFree { // FreeAsync holds the buffer itself, and scrubs it later
		first, err := p.g.HoldSized(addr, n)
		if err != nil {
			if p.released.Load() {
				return fmt.Errorf("%w: %w", ErrClosed, err)
			}
			return wrapError(err, ErrNotOwned)
		}
		if !first && p.order == nil {
			// A Hold took it since the look at the holds (the free waits for its Release, as
			// for a Hold before it), or one that has been released since (look again), or
			// another free claims it.
			if handled, err := p.out.deferFree(addr, n, false, 0, false); handled {
				return err
			}
			if !p.g.Held(addr) {
				return p.freeGuarded(addr, n, l)
			}
			return fmt.Errorf("%w: %#x is being freed by another goroutine", ErrDoubleFree, addr)
		}
		// Held before the claim: a stream uses it, and freeRecorded defers it (or finds it
		// deferred already, or being freed: a double free).
		claimed = first
	}
	err := p.freeRecorded(addr, n, l, claimed)
	if !claimed && p.order == nil && errors.Is(err, heap.ErrHeld) {
		// A Hold took the buffer since the look at the holds: the heap refused the free, and
		// nothing changed. Look at the holds again, out of the site table's locks (a last
		// Release making a free takes them, and a free waits for such a Release), and the free
		// waits for the Release, as for a Hold before it.
		return p.freeGuarded(addr, n, l)
	}
	return err
}

// freeRecorded frees the block at addr (FreeAsync on the stream of l when l is not nil) and forgets
// its allocation site and trace record, under the locks of both (lock order: the site table's
// shard, then the trace), so that an Alloc handed the same memory meanwhile is recorded after
// the free. claimed says the caller holds the block (freeGuarded's claim): it is given back
// held.
func (p *Pool) freeRecorded(addr, n uintptr, l *streamList, claimed bool) error {
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
		err = p.giveBack(addr, n, claimed, nil)
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

// scrubbed returns the bytes from addr that ZeroOnFree clears of the live buffer at addr, of n
// bytes: its extent (heap.Group.Extent), which the device's work may have written past n
// (Options.ZeroOnFree); n when the heap knows no extent (no live buffer there: the free fails).
func (p *Pool) scrubbed(addr, n uintptr) uintptr {
	if ext, err := p.g.Extent(addr); err == nil && ext >= n {
		return ext
	}
	return n
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
		clear(mem.Bytes(addr, p.scrubbed(addr, n)))
	}
	var err error
	if held {
		if on == nil || !on.TryFreeHeld(addr, n) {
			err = wrapError(p.freeSlow(addr, n, true), ErrNotOwned)
		}
	} else {
		err = p.free(mem.Bytes(addr, n), false)
	}
	if !held && errors.Is(err, heap.ErrHeld) && p.order != nil {
		return p.order.deferFree(addr, n, nil) // held since the check: a stream's copy raced the free
	}
	if err == nil && p.quota > 0 {
		p.used.Add(-int64(n))
	}
	return err
}
