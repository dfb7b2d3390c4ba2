package uvm

import (
	"errors"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Spare VRAM: the device memory that evictions, frees and failed restores give up, once their
// completion says no work uses it any more, is kept by the tier for its next restores instead
// of going back to the device heap at once. A restore takes a spare block of the exact size it
// needs before it asks the heap. The point is the cost per block: the tier evicts and restores
// blocks in batches of thousands, and a device heap Alloc and Free per block, each behind the
// heap's lock, with the heap building and releasing a page for every page's worth of blocks
// freed and taken again, cost more than the 85 ns per block that 48 GB/s of 4 KiB blocks
// allows (issue 9; BenchmarkBlockCost); taking and keeping a spare costs a few nanoseconds.
//
// Bounds and give-back:
//   - A block is kept only while the device bytes and the spare bytes together stay within
//     twice the budget (spareFactor): as much as the tier holds anyway while a batch restores
//     into fresh VRAM what an eviction in flight will give up. Beyond that it goes back to the
//     heap.
//   - When the heap refuses the tier an allocation, the tier gives every spare block back first
//     (they are of other sizes), then retries, before it waits for its transfers or evicts.
//   - When another user of a shared heap finds it full (the pressure hook), the tier gives its
//     spare blocks back first and evicts only if they were fewer bytes than asked for; the
//     VRAM of the blocks it evicts then goes back to the heap, not to the spares.
//   - Close gives them all back.
//
// Spare blocks are live blocks of the heap (its Stats count them, a Quota too); Stats.SpareBytes
// reports them. A spare block is reused only by the tier, for a block of the same size, and
// never while work may use it: it becomes spare in the same place where the tier freed it
// before (a completion, or a failed restore that queued nothing).

// spareFactor bounds the device bytes and the spare bytes together, in budgets.
const spareFactor = 2

// spareList holds the spare blocks of one size.
type spareList struct {
	size uintptr
	ps   []cuda.DevicePtr
}

// spares is the tier's spare VRAM, by block size. A tier's blocks come in few sizes, and a
// batch's blocks are often all of one size: the list used last is tried first.
type spares struct {
	lists []spareList
	last  int
	bytes uintptr
}

// list returns the list of blocks of size bytes, or nil.
func (sp *spares) list(size uintptr) *spareList {
	if sp.last < len(sp.lists) && sp.lists[sp.last].size == size {
		return &sp.lists[sp.last]
	}
	for i := range sp.lists {
		if sp.lists[i].size == size {
			sp.last = i
			return &sp.lists[i]
		}
	}
	return nil
}

// takeSpare returns a spare block of size bytes, or 0 if there is none. t.mu is held.
func (t *Tier) takeSpare(size uintptr) cuda.DevicePtr {
	if t.spare.bytes == 0 {
		return 0
	}
	l := t.spare.list(size)
	if l == nil || len(l.ps) == 0 {
		return 0
	}
	p := l.ps[len(l.ps)-1]
	l.ps = l.ps[:len(l.ps)-1]
	t.spare.bytes -= size
	return p
}

// putSpare keeps the block p of size bytes, which no work uses any more, as spare VRAM, or gives
// it back to the heap when the tier holds enough already, or gives spares back. t.mu is held.
func (t *Tier) putSpare(p cuda.DevicePtr, size uintptr) error {
	if t.noSpares || t.acct.device+t.spare.bytes+size > spareFactor*t.budget {
		return t.heap.Free(p)
	}
	sp := &t.spare
	l := sp.list(size)
	if l == nil {
		sp.lists = append(sp.lists, spareList{size: size})
		sp.last = len(sp.lists) - 1
		l = &sp.lists[sp.last]
	}
	l.ps = append(l.ps, p)
	sp.bytes += size
	return nil
}

// flushSpares gives every spare block back to the heap and returns their bytes. t.mu is held.
func (t *Tier) flushSpares() (uintptr, error) {
	sp := &t.spare
	n := sp.bytes
	var errs []error
	for i := range sp.lists {
		l := &sp.lists[i]
		for _, p := range l.ps {
			if err := t.heap.Free(p); err != nil {
				errs = append(errs, err)
			}
		}
		clear(l.ps)
		l.ps = l.ps[:0]
	}
	sp.bytes = 0
	return n, errors.Join(errs...)
}
