package pinned

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Reclaims: the deferred buffers whose streams have passed them go back to the heap (see
// stream.go for when reclaims run, and internal/streamq's Lists for the lists they poll).

// reclaimWeight is the weight of deferred buffers (see weigh) that makes the allocation's slow
// path reclaim: lighter ones wait for the next (or for an allocation that finds the pool full),
// so that a reclaim's driver calls are shared by many buffers. 32 small buffers (or 512 KiB):
// a FreeAsync pair on an idle stream cost 2.5x a plain pair on the fake at 32, 3.7x at 8, and
// the same at 64 as at 32; since a full FreeAsync cache goes back without a reclaim (pend.go's
// drainPend) and the idle query is one cgo call, 1.8x at 32, and still no better at 64.
const reclaimWeight = 32

// reclaimSoon reports whether enough buffers are deferred for the allocation's slow path to
// reclaim.
func (p *Pool) reclaimSoon() bool { return p.order != nil && p.order.weight() >= reclaimWeight }

// reclaim takes back the deferred buffers whose streams have passed them; with wait, after the
// reclaim another goroutine runs, if any, rather than leaving the work to it, and with the
// shards' caches of FreeAsync (pend.go) on the lists first.
func (p *Pool) reclaim(wait bool) error {
	if p.order == nil {
		return nil
	}
	if wait {
		p.flushAll()
	}
	return p.order.reclaim(nil, wait)
}

// waitDeferred waits for the streams of the deferred buffers (a synchronize of each), frees the
// buffers their waits cover and gives the shards' free memory to the arena: an allocation the
// pool refused for want of memory while deferred buffers waited for their streams. Streams the
// driver refuses to synchronize are answered with a synchronize of the context (Lists.Reclaim).
func (p *Pool) waitDeferred() error {
	p.flushAll()
	o := p.order
	o.reclMu.Lock()
	var err error
	if o.done, err = o.lists.Drain(o.done); err != nil {
		// A stream the driver refuses to synchronize (destroyed, most likely) is answered as a
		// reclaim answers it: its list found lost, the context synchronized once.
		// A stream a capture holds keeps its buffers (Drain's error says so, ErrCapturing), and
		// so does the legacy stream when the driver made no event for its point (ErrNoEvent):
		// those refusals stay whatever the reclaim answers.
		var rerr error
		if o.done, rerr = o.lists.Reclaim(o.done, afterLostSync); rerr != nil {
			err = errkind.Once(err, rerr)
		} else if !errors.Is(err, pinmalloc.ErrCapturing) && !errors.Is(err, streamq.ErrNoEvent) {
			err = nil
		}
	}
	// The driver's, with this package's sentinel, as a reclaim's (streamSentinel).
	err = streamError("wait for the streams of deferred buffers", err)
	err = errors.Join(err, o.freeDone(nil))
	if invariants.Enabled {
		o.mustVerify()
	}
	o.reclMu.Unlock()
	p.collectAll()
	return err
}

// freeDeferred frees a deferred buffer for real, its streams having passed it: straight back
// on its page when it is a block of on, the heap of a shard the caller holds (nil for none).
// Under a quota it counts the buffer returned after it left the quota, while the reclaim or
// the FreeAsync cache that had it still shows it returning (see quotaRoom).
func (p *Pool) freeDeferred(d deferred, on *heap.Heap) error {
	err := p.giveBack(d.addr, d.n, true, on)
	if p.quota > 0 {
		p.order.returned.Add(1)
	}
	return err
}

// reclaim frees the deferred buffers whose streams have passed their free, and gives the
// streams still busy a point for the buffers freed since their last. When another goroutine
// reclaims, it returns at once, or with wait, waits for that one and reclaims after it. on is
// the heap of the shard the caller holds, if any (the allocation's slow path): its own blocks
// go straight back on their pages (heap.Heap.TryFreeHeld keeps empty ones for the allocation).
func (o *streamOrder) reclaim(on *heap.Heap, wait bool) error {
	if !wait {
		if o.weight() == 0 && o.lists.Streams() == 0 || !o.reclMu.TryLock() {
			return nil
		}
	} else {
		o.reclMu.Lock() // after a reclaim under way, which may be freeing what it took
	}
	err := o.reclaimLocked(on)
	if invariants.Enabled {
		o.mustVerify()
	}
	o.reclMu.Unlock()
	return err
}

// reclaimLocked is reclaim, reclMu held.
func (o *streamOrder) reclaimLocked(on *heap.Heap) error {
	// A stream the driver refuses (destroyed, most likely) can take no point: the lists wait
	// for the whole context, which waits for the work it still had, once for all of them.
	var errs []error
	var err error
	if o.done, err = o.lists.Reclaim(o.done, afterLostSync); err != nil {
		// The driver's, with this package's sentinel (streamSentinel): ErrDeviceFault after a
		// fault, none where a capture put off the synchronize of the context.
		errs = append(errs, streamError("deferred buffers", err))
	}
	if afterPoll != nil {
		afterPoll()
	}
	if err := o.freeDone(on); err != nil { // appended only when not nil: no allocation
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// afterLostSync, when set (by tests), runs in a reclaim between the synchronize for the lists
// it found lost and the take-back of their buffers; afterPoll between the poll, which takes
// the buffers the streams have passed off the lists, and their frees.
var afterLostSync, afterPoll func()

// returning reports whether a deferred buffer may still leave the quota: some wait on the
// lists or in a shard's FreeAsync cache, or a reclaim is under way, which frees the buffers it
// took off the lists only after its poll.
func (o *streamOrder) returning() bool {
	if o.weight() > 0 || o.cached.Load() > 0 {
		return true
	}
	if !o.reclMu.TryLock() {
		return true
	}
	o.reclMu.Unlock()
	return false
}

// freeDone frees the buffers of o.done whose last stream has passed them (the lists took the
// weight of the others off as they handed them back), on's own straight back on their pages
// (see reclaim). reclMu is held.
func (o *streamOrder) freeDone(on *heap.Heap) error {
	var errs []error
	var freed int64
	for _, d := range o.done {
		if d.shared {
			if !o.passed(d.addr) {
				continue
			}
			o.shared.Add(-1)
			o.sharedBytes.Add(-int64(d.n))
			freed += weigh(d.n)
		}
		if o.direct && on != nil && on.TryFreeHeld(d.addr, d.n) {
			// giveBack's fast path, called here: no call of o.free per buffer.
			continue
		}
		if err := o.free(d, on); err != nil {
			errs = append(errs, err)
		}
	}
	o.sharedWeight.Add(-freed)
	o.done = o.done[:0]
	o.freeDones++
	return errors.Join(errs...)
}

// reclaims returns the count of the take-backs finished (freeDone), once no reclaim is under
// way: two equal counts bracket a time no reclaim overlapped (Pool.userLiveQuiet).
func (o *streamOrder) reclaims() uint64 {
	o.reclMu.Lock()
	defer o.reclMu.Unlock()
	return o.freeDones
}

// passed counts one stream of a shared buffer as passed, and reports whether it was the last.
func (o *streamOrder) passed(addr uintptr) bool {
	sh := o.shard(addr)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	u := sh.m[addr]
	if u.left--; u.left > 0 {
		sh.m[addr] = u
		return false
	}
	delete(sh.m, addr)
	return true
}
