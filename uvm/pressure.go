package uvm

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
)

// Device heap integration: the tier is the pressure hook of its device heap
// (device.Heap.SetPressure of Tier.Relieve, a device.PressureFunc), so that an allocation of
// another user of a shared heap (Options.Heap) that finds no memory asks the tier to evict cold
// blocks before it fails. It is the one call from device up into uvm, and it is made through
// that type: device.Heap.Alloc calls the hook, the hook calls the tier, the tier frees VRAM
// back down into the heap (device.Heap.Free), and the Alloc retries.
//
// The hook runs on the allocating goroutine, without the heap's lock. For an allocation on
// the tier's own H2D stream it asks only the tier's peers, the other tiers of a shared heap
// (peers.go): that is the tier itself, inside devAlloc with t.mu held, which answers its own
// pressure (taking t.mu again would deadlock). For any other
// stream it takes t.mu, gives the tier's spare VRAM back to the heap (spare.go) and, unless
// that was enough, evicts (CauseHeapPressure) and waits for the copies out, whose
// completions give the VRAM back to the heap, then lets the heap retry. When it cannot help
// (nothing evictable, the tier closed) it passes the call to the hook it replaced, after
// dropping t.mu, so hooks chain without holding two tiers' locks at once.
//
// How much to evict: the device heap hands another stream only memory a free has emptied
// whole (a 2 MiB segment, or a huge block's chunks), so n evicted bytes of small blocks may
// free no segment. Each call evicts n rounded up to a segment, coldest first; the heap calls
// the hook up to 3 times per Alloc, so a request that the first batch did not satisfy gets
// more (up to three times n). A request no eviction can serve, larger than the heap could ever
// hold (its capacity, or the device's memory), evicts nothing: nor does the hook chain it.

// pressureHook is the tier's side of the hook.
type pressureHook struct {
	link      *hookLink // what the tier installed, set before it is installed and never changed after
	installed bool      // t.mu guards it
	// own is the tier's H2D stream, set before the hook is installed and never changed after
	// (release zeroes engine.h2d, not this): relieve reads it without t.mu.
	own cuda.Stream
	// most is the largest request the heap could ever serve: its capacity, or, for a heap of
	// device memory, the device's memory when that is less. Set with own.
	most uintptr
	// forgot says that a shared heap forgot own (release), which may then be destroyed.
	forgot bool
}

// hookLink is the tier's place in its heap's chain of pressure hooks: the hook the tier
// installs (fn, its call), which calls the tier, and the hook it replaced (prev), which the tier
// passes the calls it cannot help with on to. When the tier leaves the chain (Close), the link
// lets go of it and passes every call on to prev. Tiers sharing a heap install their links on
// top of each other, in the order of their New. A tier that leaves with no hook installed after
// its own puts its prev back; one whose link another tier's replaced (above) makes that link
// call its prev instead, and so leaves the chain; one whose link a hook of another user
// replaced leaves its link in the chain, calling prev, as that hook calls it. So tiers may close
// in any order: the chain keeps every tier still open, and no link of a tier that closed unless
// another user's hook was installed over it. Safe for concurrent use.
type hookLink struct {
	t    atomic.Pointer[Tier]
	prev atomic.Pointer[device.PressureFunc] // nil: none
	// fn is the hook the link installs (call), made once: a link installed over it knows from
	// its identity (device.SamePressure) that the hook it replaced is this link's.
	fn device.PressureFunc
	// above is the link of a tier installed right over this one (its prev is fn), below the
	// link this one's prev is. peers.mu guards them.
	above, below *hookLink
}

// call is the hook the link installs: the tier's Relieve while the tier is in the chain, else
// the hook it replaced.
func (l *hookLink) call(n int, s cuda.Stream) bool {
	if t := l.t.Load(); t != nil {
		return t.Relieve(n, s)
	}
	return l.passOn(n, s)
}

// passOn calls the hook the link replaced, if any.
func (l *hookLink) passOn(n int, s cuda.Stream) bool {
	p := l.prev.Load()
	return p != nil && (*p)(n, s)
}

// installPressure makes the tier the heap's pressure hook, keeping the one it replaces.
func (t *Tier) installPressure() {
	t.hook.own = t.engine.h2d
	a := t.mem.heap.Arena().Stats() // the arena's alone: no poll of the heap
	t.hook.most = uintptr(a.Capacity)
	if total, err := t.dev.TotalMem(); err == nil && a.Kind == arena.Device && total < t.hook.most {
		t.hook.most = total // VRAM: managed memory oversubscribes it, and host memory is not it
	}
	l := &hookLink{}
	l.fn = l.call
	t.hook.link = l
	peers.mu.Lock() // the links' places in the chain change under it
	defer peers.mu.Unlock()
	if prev := t.mem.heap.SetPressure(l.fn); prev != nil { // meanwhile, a call finds no tier
		l.prev.Store(&prev)
		l.below = t.peerLink(prev)
		if l.below != nil {
			l.below.above = l
		}
	}
	l.t.Store(t)
	t.hook.installed = true
	t.joinPeers()
}

// uninstallPressure takes the tier out of its heap's chain of hooks (see hookLink): it puts
// the replaced hook back, or has the link of the tier installed over it call that hook, unless
// another user's hook was installed over it (the heap's CompareAndSwapPressure tells, when no
// tier was installed after it).
func (t *Tier) uninstallPressure() {
	if !t.hook.installed {
		return
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	top := t.leavePeers()
	l := t.hook.link
	l.t.Store(nil) // a late call of the hook (an Alloc that loaded it before) still chains
	switch {
	case l.above != nil: // it calls l: it calls what l calls now
		l.above.prev.Store(l.prev.Load())
		l.above.below = l.below
		if l.below != nil {
			l.below.above = l.above
		}
		l.above, l.below = nil, nil
	case top:
		var prev device.PressureFunc
		if p := l.prev.Load(); p != nil {
			prev = *p
		}
		// Unless another user's hook was installed over l since (its chain may call l): l
		// stays under it then, calling prev, as below.
		if !t.mem.heap.CompareAndSwapPressure(l.fn, prev) {
			break
		}
		if l.below != nil {
			l.below.above = nil
		}
		l.below = nil
	}
	t.hook.installed = false
}

// Relieve is the tier's device heap's pressure hook (a device.PressureFunc, which the tier
// installs at New and takes off at Close): it gives the tier's spare VRAM back to the heap and,
// if that was fewer than n bytes rounded up to a 2 MiB segment, evicts cold blocks worth that
// and waits for their copies, so that their VRAM is back in the heap; it reports whether it
// gave any back. When it cannot help, it passes the call on to the hook it replaced. For an
// allocation on the tier's own stream s (the tier's own restores, which answer their pressure
// themselves) it asks only the other tiers of a shared heap, trying their locks, never waiting
// for one. It does nothing, and passes nothing on, for n of zero or less or n larger than the
// heap could ever hold (MakeRoom says which). To make room in a heap shared with other users
// ahead of an allocation, call MakeRoom, which says why it could not.
func (t *Tier) Relieve(n int, s cuda.Stream) bool {
	if t.checkRoom(n) != nil {
		return false
	}
	if s == t.hook.own { // the tier's own restore, t.mu held: its peers may help (peers.go)
		return t.askPeers(n)
	}
	t.mu.Lock()
	gave := t.relieveLocked(n)
	t.unlock("the pressure hook")
	if gave {
		return true
	}
	return t.hook.link != nil && t.hook.link.passOn(n, s)
}

// relieveLocked is the work of Relieve (and of a peer's, relieveTry) for an allocation of n
// bytes: evictForHeap, unless the tier is closed. t.mu is held.
func (t *Tier) relieveLocked(n int) bool {
	if t.closed {
		return false
	}
	gave, _ := t.evictForHeap(uintptr(n)) // a failed batch counts in Stats.Failures
	return gave
}

// MakeRoom does what Relieve does for another user of the tier's device heap about to allocate
// n bytes, and says why when it falls short: nil once it gave VRAM back (its spare VRAM, or cold
// blocks evicted, their copies waited for), and it asks no other hook. Errors: ErrInvalidOptions
// (and pinmalloc.ErrInvalidSize) for n of zero or less, ErrTooLarge for n larger than the heap
// could ever hold (its capacity, or the device's memory), both changing nothing; ErrAllPinned
// when it had nothing to give (no spare VRAM, no block on the device that is not acquired);
// ErrClosed; and the errors of the evictions and of the waits for them.
func (t *Tier) MakeRoom(n int) error {
	if err := t.checkRoom(n); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.unlock("MakeRoom")
	if t.closed {
		return ErrClosed
	}
	_, err := t.evictForHeap(uintptr(n))
	return faulted(err)
}

// checkRoom refuses a request of n bytes that no eviction can serve.
func (t *Tier) checkRoom(n int) error {
	switch {
	case n <= 0:
		return invalidSize(fmt.Errorf("%w: room for %d bytes (want 1 or more)", ErrInvalidOptions, n))
	case uintptr(n) > t.hook.most:
		return fmt.Errorf("%w: room for %d bytes: the device heap can hold %d at most",
			ErrTooLarge, n, t.hook.most)
	}
	return nil
}

// evictForHeap gives the spare VRAM back to the heap and, if that was fewer than n bytes
// rounded up to a segment (see the file comment), evicts cold blocks worth that and waits
// until their VRAM is back in the heap. gave reports whether it gave any back; err why it fell
// short, if it did. t.mu is held.
func (t *Tier) evictForHeap(n uintptr) (gave bool, err error) {
	if err := t.poll(); err != nil {
		return false, err
	}
	t.st.HeapPressure++
	want := roundChunk(n)
	spare, err := t.flushSpares()
	if err != nil {
		return false, err
	}
	if spare >= want {
		return true, nil
	}
	if t.pickVictims(want) == 0 {
		t.unchoose(t.scratch.victims)
		if spare > 0 {
			return true, nil
		}
		return false, fmt.Errorf("%w: no spare VRAM and no block to evict for %d bytes of the heap",
			ErrAllPinned, n)
	}
	if err := t.evict(t.scratch.victims, CauseHeapPressure); err != nil {
		return spare > 0, err
	}
	err = t.drain()
	_, ferr := t.flushSpares() // the evictions' VRAM, kept as spares when they completed
	if err = errors.Join(err, ferr); err != nil {
		return false, err
	}
	return true, nil
}
