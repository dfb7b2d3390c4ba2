package uvm

import (
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// Device heap integration: the tier is the pressure hook of its device heap
// (device.Heap.SetPressure of Tier.Relieve, a device.PressureFunc), so that an allocation of
// another user of a shared heap (Options.Heap) that finds no memory asks the tier to evict cold
// blocks before it fails. It is the one call from device up into uvm, and it is made through
// that type: device.Heap.Alloc calls the hook, the hook calls the tier, the tier frees VRAM
// back down into the heap (device.Heap.Free), and the Alloc retries.
//
// The hook runs on the allocating goroutine, without the heap's lock. For an allocation on
// the tier's own H2D stream it does nothing: that is the tier itself, inside devAlloc with
// t.mu held, which answers its own pressure (taking t.mu again would deadlock). For any other
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
// more (up to three times n).

// pressureHook is the tier's side of the hook.
type pressureHook struct {
	prev      device.PressureFunc // the hook the tier replaced, to chain to and put back; t.mu guards it
	installed bool
	// own is the tier's H2D stream, set before the hook is installed and never changed after
	// (release zeroes engine.h2d, not this): relieve reads it without t.mu.
	own cuda.Stream
}

// installPressure makes the tier the heap's pressure hook, keeping the one it replaces.
func (t *Tier) installPressure() {
	t.hook.own = t.engine.h2d
	t.hook.prev = t.mem.heap.SetPressure(t.Relieve)
	t.hook.installed = true
}

// uninstallPressure puts the replaced hook back. Tiers sharing a heap uninstall in the
// reverse order of their New (each puts back the hook it found).
func (t *Tier) uninstallPressure() {
	if t.hook.installed {
		t.mem.heap.SetPressure(t.hook.prev)
		t.hook.installed = false // prev stays: a late call of the hook (an Alloc that loaded it before) still chains
	}
}

// Relieve is the tier's device heap's pressure hook (a device.PressureFunc, which the tier
// installs at New and takes off at Close): it gives the tier's spare VRAM back to the heap and,
// if that was fewer than n bytes rounded up to a 2 MiB segment, evicts cold blocks worth that
// and waits for their copies, so that their VRAM is back in the heap; it reports whether it
// gave any back. It does nothing for an allocation on the tier's own stream s (the tier's own
// restores answer their pressure themselves) and passes the call on to the hook it replaced
// when it cannot help. Call it to make room in a heap shared with other users ahead of an
// allocation.
func (t *Tier) Relieve(n int, s cuda.Stream) bool {
	if s == t.hook.own {
		return false
	}
	t.mu.Lock()
	ok := !t.closed && t.evictForHeap(uintptr(n))
	if invariants.Enabled {
		t.checkInvariants("the pressure hook")
	}
	prev := t.hook.prev
	t.mu.Unlock()
	if ok {
		return true
	}
	return prev != nil && prev(n, s)
}

// evictForHeap gives the spare VRAM back to the heap and, if that was fewer than n bytes
// rounded up to a segment (see the file comment), evicts cold blocks worth that and waits
// until their VRAM is back in the heap. It reports whether it gave any back. t.mu is held.
func (t *Tier) evictForHeap(n uintptr) bool {
	if t.poll() != nil {
		return false
	}
	t.st.HeapPressure++
	want := roundChunk(n)
	spare, err := t.flushSpares()
	if err != nil {
		return false
	}
	if spare >= want {
		return true
	}
	if t.pickVictims(want) == 0 {
		t.unchoose(t.scratch.victims)
		return spare > 0
	}
	if t.evict(t.scratch.victims, CauseHeapPressure) != nil {
		return spare > 0
	}
	err = t.drain()
	_, ferr := t.flushSpares() // the evictions' VRAM, kept as spares when they completed
	return err == nil && ferr == nil
}
