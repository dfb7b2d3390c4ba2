package pinned

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Closing a pool: Close stops allocation, and the memory goes once no buffer is live and no
// deferred one waits for its streams, at Close or at the free, Trim or ForgetStream that
// finishes it (finishClose).

// Close stops allocation. When buffers are live it returns an error wrapping ErrLiveBlocks
// with their count and bytes, at once, and keeps the memory until the last of them is freed
// (so nothing in use is unmapped under a caller); another Close then returns ErrClosed. Else it
// waits, 5 s at most (not at all after a device fault, whose error answers every wait), for
// the buffers freed with FreeAsync (or freed while a stream used them) until their streams
// have passed their frees, and then releases all
// memory and returns nil. If some still wait then, it returns an error wrapping ErrBusy with
// their count and bytes and keeps all the memory mapped: a later Close waits for them again,
// and a later Free, FreeAsync, ForgetStream or Trim releases the memory once they have passed
// (none of those waits for them). A buffer freed while held (Hold) is not live: until its last
// Release it counts with those that wait (ErrBusy; that Release then releases the memory), and
// Close waits for a last Release making its free already, whose buffer is on its way back.
// With Options.Trace, Close also writes out the trace; an error
// doing so wraps ErrTrace. When the driver refuses to give memory back (to unregister it,
// say), Close returns its error and the memory stays the pool's, counted in Stats: a later
// Close or Trim gives it back, as it destroys the events and releases the device whose
// destroy or release the driver refused.
func (p *Pool) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		if p.busy.Load() && !p.released.Load() {
			return p.close()
		}
		if p.refused.Load() {
			return wrapError(p.releaseRefused(), ErrClosed)
		}
		return ErrClosed
	}
	return errors.Join(p.close(), p.FlushTrace()) // nil when both are
}

func (p *Pool) close() error {
	// No shard is added from now on, and a shard being added is published before this returns.
	p.growMu.Lock()
	//lint:ignore SA2001 an empty critical section: a barrier for newShard
	p.growMu.Unlock()
	// Its error is said by drain's reclaims below, or, where Close returns before, by the next
	// Close or Trim: a driver's refusal leaves the buffers it concerns deferred (reclaim.go).
	_ = p.reclaim(true)
	p.waitCachesOut()
	if afterCloseReclaim != nil {
		afterCloseReclaim()
	}
	n, bytes := p.userLiveSettled()
	if afterCloseCount != nil {
		afterCloseCount()
	}
	if p.released.Load() { // meanwhile: by a last Release Close waited for, or a free
		return wrapError(p.releaseRefused(), ErrClosed)
	}
	if n > 0 {
		sites := ""
		if p.sites != nil {
			if top := p.sites.top(topSites); top != "" {
				sites = "; " + top
			}
		}
		return fmt.Errorf("%w: %s (%d bytes); the pool's memory is released when the last is freed%s",
			ErrLiveBlocks, units.Count(uint64(n), "buffer"), bytes, sites)
	}
	if err := p.drain(); err != nil {
		p.busy.Store(true)
		return err
	}
	p.busy.Store(false)
	// Under counting too: a last Release that began its free since the count above counts the
	// buffer neither freed while held nor given back until it ends.
	n, bytes, held := p.liveSettled()
	if p.released.Load() { // meanwhile, by that Release
		return wrapError(p.releaseRefused(), ErrClosed)
	}
	if n > 0 { // freed while held, or a free of the last buffer deferred it meanwhile
		p.busy.Store(true)
		if held > 0 {
			return fmt.Errorf("%w: %s freed while held wait for their last Release, which releases the pool's memory", ErrBusy, units.Count(uint64(held), "buffer"))
		}
		return fmt.Errorf("%w: %s (%d bytes) wait for their streams; a later Close, Free or Trim releases the memory once the streams have passed them", ErrBusy, units.Count(uint64(n), "buffer"), bytes)
	}
	return wrapError(p.releaseAll(), ErrClosed)
}

// waitCachesOut waits, once Close has flushed every shard's FreeAsync cache (pend.go), for the
// caches a FreeAsync took out of its shard before and has not yet put on their stream's list:
// their buffers are in no cache and on no list, so a count would take them for buffers the
// caller has (ErrLiveBlocks with every buffer freed). Nothing fills a cache after the flush: a
// FreeAsync reads closed inside its fast section, which the flush either waited for (and then
// flushed what it cached) or preceded (and the section sees closed). So streamOrder.cached,
// which counts the caches holding buffers and those on their way, is then the caches on their
// way, and falls to zero as soon as their pushes (one lock each) end.
func (p *Pool) waitCachesOut() {
	if p.order == nil || p.order.cached.Load() == 0 {
		return
	}
	if closeWaitsCache != nil {
		closeWaitsCache()
	}
	for p.order.cached.Load() != 0 {
		runtime.Gosched()
	}
}

// closeWaitsCache, when set (by tests), runs in Close when it waits for caches on their way.
var closeWaitsCache func()

// live collects every shard and counts the live buffers, the deferred ones with them (the heap
// holds those until their streams have passed them).
func (p *Pool) live() (n, bytes uint64) {
	p.each(func(h *heap.Heap) {
		st := h.Stats()
		n += st.Live
		bytes += st.InUse
	})
	return n, bytes
}

// userLive counts the buffers the caller has not freed: the live ones less the deferred.
func (p *Pool) userLive() (n, bytes uint64) {
	n, bytes = p.live()
	dn, dbytes := p.deferred()
	dn, dbytes = dn+uint64(p.out.freedN.Load()), dbytes+uint64(p.out.freedBytes.Load()) // hold.go
	return n - min(n, dn), bytes - min(bytes, dbytes)
}

// userLiveSettled is userLive once the last Releases under way have made the frees that waited
// for their holds (hold.go): a buffer on its way back is not one the caller has.
func (p *Pool) userLiveSettled() (n, bytes uint64) {
	p.lockCounting()
	defer p.out.counting.Unlock()
	return p.userLiveQuiet()
}

// liveSettled is live, with the buffers freed while held that wait for their last Release, once
// the last Releases under way have given theirs back (see userLiveSettled).
func (p *Pool) liveSettled() (n, bytes uint64, held int64) {
	p.lockCounting()
	defer p.out.counting.Unlock()
	n, bytes = p.live()
	return n, bytes, p.out.freedN.Load()
}

// lockCounting takes the holds table's counting lock for writing, after the last Releases
// under way (hold.go).
func (p *Pool) lockCounting() {
	if !p.out.counting.TryLock() {
		if releaseWait != nil {
			releaseWait()
		}
		p.out.counting.Lock()
	}
}

// userLiveQuiet is userLive counted while no reclaim runs: a reclaim takes buffers off the
// lists (they stop counting as deferred) before it frees them (they stop counting as live),
// and a count across that took them for buffers the caller has (Close racing Stats said
// ErrLiveBlocks with every buffer freed, and kept the pool's memory for good). It counts
// again when a reclaim ran meanwhile, a few times at most: the reclaims of a pool hammered
// with Stats could outrun it, and then the count errs as userLive's does.
func (p *Pool) userLiveQuiet() (n, bytes uint64) {
	if p.order == nil {
		return p.userLive()
	}
	for range quietCounts {
		g := p.order.reclaims()
		n, bytes = p.userLive()
		if p.order.reclaims() == g {
			break
		}
	}
	return n, bytes
}

// quietCounts bounds userLiveQuiet's counts.
const quietCounts = 8

// afterCloseReclaim, when set (by tests), runs in Close between its reclaim and its count of
// the live buffers; afterCloseCount between that count and its drain.
var afterCloseReclaim, afterCloseCount func()

// finishClose runs after a free (of the buffer at addr; 0 for none) once the pool is closed:
// when that was the last buffer the caller had, it waits for the buffer's own streams
// (closeWait at most: see settle), takes back what the streams have passed, and releases the
// memory when no buffer is deferred any more. Otherwise it marks the pool busy, so that a
// later Close, Free, FreeAsync, ForgetStream or Trim tries again; it never waits for the
// streams of other buffers.
func (p *Pool) finishClose(addr uintptr) {
	if beforeFinishClose != nil {
		beforeFinishClose()
	}
	if p.released.Load() {
		return
	}
	// A refusal leaves its buffers deferred, the pool busy: the next Close or Trim says it.
	_ = p.reclaim(true)
	if n, _ := p.userLiveQuiet(); n > 0 {
		return
	}
	if addr != 0 && p.order != nil {
		p.settle(addr)
	}
	if n, _ := p.live(); n > 0 {
		p.busy.Store(true)
		return
	}
	if err := p.releaseAll(); err == nil {
		p.busy.Store(false)
	}
}

// beforeFinishClose, when set (by tests), runs at the start of finishClose.
var beforeFinishClose func()

func (p *Pool) releaseAll() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.released.Load() {
		return nil
	}
	var first error
	var c counts
	p.eachOf(p.closing(), func(h *heap.Heap) {
		if first != nil {
			return // the lender stays open for the room its borrowers hold
		}
		hs := h.Stats() // before its Close: a closed heap keeps no counters
		if err := h.Close(); err != nil && !errors.Is(err, heap.ErrClosed) {
			first = err
			return
		}
		c.allocs, c.frees, c.peak = c.allocs+hs.Allocs, c.frees+hs.Frees, c.peak+hs.Peak
	})
	if first != nil {
		return first // a buffer came back to life: a racing Alloc before closed was seen
	}
	p.counted = c // published by the store below, read by Stats after it loads released
	p.released.Store(true)
	p.stopPurge()
	// The frees made since Close wrote the trace out (the release by a last Free, Trim or a
	// later Close) are its last records: written now, or the trace ended with their buffers
	// live. An error stays the trace's, for the next FlushTrace (and a first Close) to say.
	_ = p.FlushTrace()
	if p.order != nil {
		disown(p) // before its arena goes: PoolOf looks addresses up there
	}
	err := p.a.Close() // the arena keeps what its provider refused
	if p.order != nil {
		// Its events, before the device goes: kept when refused. A device fault refuses
		// the memory and the events alike: said once.
		err = errkind.Once(err, p.order.close())
	}
	if err == nil {
		err = closeDevice(p.a.Provider()) // its retain kept when refused
	} // else the device stays, for the driver calls that give the rest back
	p.refused.Store(err != nil) // for releaseRefused
	return err
}

// closing returns the shards in the order releaseAll closes their heaps: the big shard last.
// It lends the others room (heap.Heap.SetLender), and a lender closes after its borrowers:
// the room a borrower gives back at its Close goes onto the lender's returned list when
// another goroutine holds the lender then (a late Free's freeLarge, say), and only a lender
// still open takes it back (at its own Close). Closed first, it kept those chunks, and the
// arena refused to close: the pool's memory stayed after the last free.
func (p *Pool) closing() []*shard {
	ss := append([]*shard(nil), *p.shards.Load()...)
	if big := p.big.s.Load(); big != nil {
		ss = slices.DeleteFunc(ss, func(s *shard) bool { return s == big })
		ss = append(ss, big)
	}
	return ss
}

// releaseRefused gives back, after the release, the memory and the events the driver refused
// to give back then, and the device after them. It returns nil when nothing is left.
func (p *Pool) releaseRefused() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if !p.refused.Load() {
		return nil
	}
	if err := p.a.Close(); err != nil && !errors.Is(err, arena.ErrClosed) {
		return err
	}
	if p.order != nil {
		if err := p.order.close(); err != nil {
			return err
		}
	}
	if err := closeDevice(p.a.Provider()); err != nil {
		return err
	}
	p.refused.Store(false)
	return nil
}
