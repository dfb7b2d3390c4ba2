package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Spare VRAM: the device memory that evictions, frees and failed restores give up, once their
// completion says no work uses it any more, is kept by the tier for its next restores instead
// of going back to the device heap at once. A restore takes a spare block of the exact size it
// needs before it asks the heap.
//
// Why a cache in front of the device heap, which is itself a cache of VRAM: the cost per block.
// The tier evicts and restores blocks in batches of thousands, and 48 GB/s of 4 KiB blocks
// leaves 85 ns per block (issue 9). A device heap Free and Alloc per block cost more than that:
// each takes the heap's lock (the heap is shared, and orders its memory by stream), and the
// heap builds and releases a page for every page's worth of blocks freed and taken again; an
// Alloc+Free pair alone took 150 ns at 4 KiB on an H100's host (DESIGN.md). Taking and keeping
// a spare costs a few nanoseconds, under the tier's lock, which the batch holds anyway.
// BenchmarkBlockCost (mover "none", the fake driver; median CPU time per block of 6 interleaved
// runs on the 2-core build machine, load 5 to 8, with the spares and with every block freed to
// and taken from the heap): restoring a block 25 ns with spares, 77 ns without at 4 KiB, 25 and
// 183 ns at 64 KiB; evicting one 62 and 104 ns at 4 KiB, 51 and 102 ns at 64 KiB. Folding the
// spares into the device heap would not remove this cache, only move it: the heap would need a
// list of exact-size blocks per owner, taken without its lock, which is what the spares are;
// here they are private to the tier and guarded by the lock it holds.
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
//   - Close gives them all back; those the heap refuses it keeps, with what it needs to give
//     them back, and says so (ErrHeldBack): a later Close tries again.
//   - A block the heap refuses and keeps live (a heap with ZeroOnFree whose clear of it is
//     refused: while a capture holds the legacy stream, or after a fault) stays spare, beyond
//     the bound, and the refusal is returned: given back with the others later, rather than
//     lost to the tier and live in the heap for good (heapKept).
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

// spares is the tier's spare VRAM. A completion hands over its whole list of blocks as one
// run, in O(1) (the completion runs after the copies, when nothing overlaps it: on a GPU the
// time it takes adds to the batch's); runs are sorted into lists by size only as restores take
// their blocks, which overlaps the copies they queue. A tier's blocks come in few sizes, and a
// batch's blocks are often all of one size: the newest run's last block, then the list used
// last, are tried first.
type spares struct {
	runs  [][]devBlock // completions' lists, newest last
	lists []spareList
	last  int
	bytes uintptr // of runs and lists
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

// add adds d to the list of its size.
func (sp *spares) add(d devBlock) {
	l := sp.list(d.size)
	if l == nil {
		sp.lists = append(sp.lists, spareList{size: d.size})
		sp.last = len(sp.lists) - 1
		l = &sp.lists[sp.last]
	}
	l.ps = append(l.ps, d.p)
}

// popRun takes the last block of the newest run; an emptied run's list goes back to
// t.batches.devLists.
func (t *Tier) popRun() devBlock {
	sp := &t.spare
	n := len(sp.runs) - 1
	r := sp.runs[n]
	d := r[len(r)-1]
	if r = r[:len(r)-1]; len(r) > 0 {
		sp.runs[n] = r
	} else {
		sp.runs[n] = nil
		sp.runs = sp.runs[:n]
		t.putDevList(r)
	}
	return d
}

// takeSpare returns a spare block of size bytes, or 0 if there is none. t.mu is held.
func (t *Tier) takeSpare(size uintptr) cuda.DevicePtr {
	sp := &t.spare
	if sp.bytes == 0 {
		return 0
	}
	if n := len(sp.runs); n > 0 {
		if r := sp.runs[n-1]; r[len(r)-1].size == size {
			sp.bytes -= size
			return t.popRun().p
		}
	}
	if l := sp.list(size); l != nil && len(l.ps) > 0 {
		p := l.ps[len(l.ps)-1]
		l.ps = l.ps[:len(l.ps)-1]
		sp.bytes -= size
		return p
	}
	// Sort the runs' blocks into the lists, newest first, until one of this size comes.
	for len(sp.runs) > 0 {
		d := t.popRun()
		if d.size == size {
			sp.bytes -= size
			return d.p
		}
		sp.add(d)
	}
	return 0
}

// putSpares keeps the blocks of a completion, bytes together, as spare VRAM (see putSpare);
// the list becomes the spares' when all of them are kept. The heap's refusals are said once
// (refusals). t.mu is held.
func (t *Tier) putSpares(list []devBlock, bytes uintptr) error {
	if len(list) == 0 {
		return nil
	}
	if bytes > 0 && t.keepSpare(bytes) {
		t.spare.runs = append(t.spare.runs, list)
		t.spare.bytes += bytes
		return nil
	}
	var r refusals
	for _, d := range list {
		t.putSpare(d.p, d.size, &r)
	}
	if cap(list) >= launchJobs { // a batch's list: the next batch reuses it
		t.putDevList(list)
	}
	return r.err("VRAM the tier gave back")
}

// putSpare keeps the block p of size bytes, which no work uses any more, as spare VRAM, or gives
// it back to the heap when the tier holds enough already. A block the heap refuses and keeps
// live (heapKept: its clear, Options.ZeroOnFree, refused while a CUDA graph capture holds the
// stream it would run on, or after a fault) is kept as spare all the same, beyond the bound,
// rather than lost to the tier: flushSpares gives it back with the others. The refusal is noted
// in r. t.mu is held.
func (t *Tier) putSpare(p cuda.DevicePtr, size uintptr, r *refusals) {
	if !t.keepSpare(size) {
		err := t.mem.heap.Free(p)
		if err == nil {
			return
		}
		kept := heapKept(err)
		r.note(err, kept)
		if !kept {
			return
		}
	}
	t.spare.add(devBlock{p, size})
	t.spare.bytes += size
}

// heapKept reports whether the device heap, refusing the Free of a block with err, keeps the
// block live: every refusal but one that says it has no such block live (not owned, freed
// already) or is closed. The heap refuses before it frees: a ZeroOnFree clear refused (a
// capture, ErrCapturing; a fault) leaves the block live, which only a Free may give back.
func heapKept(err error) bool {
	return !errors.Is(err, pinmalloc.ErrNotOwned) && !errors.Is(err, pinmalloc.ErrDoubleFree) &&
		!errors.Is(err, pinmalloc.ErrClosed)
}

// refusals counts the device heap's refusals of blocks the tier gives back, to say them once:
// the first refusal, and how many blocks the heap refused and how many of those the tier kept
// as spare VRAM (heapKept: see putSpare).
type refusals struct {
	first   error
	n, kept int
}

// note counts the heap's refusal err of a block, kept as spare or not.
func (r *refusals) note(err error, kept bool) {
	if r.n++; r.first == nil {
		r.first = err
	}
	if kept {
		r.kept++
	}
}

// err returns nil when the heap refused nothing, else an error that says so once, what naming
// the VRAM given back.
func (r *refusals) err(what string) error {
	if r.n == 0 {
		return nil
	}
	n := units.Count(uint64(r.n), "block")
	switch r.kept {
	case r.n:
		return fmt.Errorf("uvm: the device heap refused %s of %s, kept as spare: %w",
			n, what, r.first)
	case 0:
		return fmt.Errorf("uvm: the device heap refused %s of %s: %w", n, what, r.first)
	}
	return fmt.Errorf("uvm: the device heap refused %s of %s (%d kept as spare): %w",
		n, what, r.kept, r.first)
}

// keepSpare reports whether n more bytes of spare VRAM stay within what the tier may hold.
func (t *Tier) keepSpare(n uintptr) bool {
	return t.acct.device+t.spare.bytes+n <= spareFactor*t.mem.budget
}

// flushSpares gives every spare block back to the heap and returns their bytes. A block the
// heap refuses and keeps live (heapKept, see putSpare) stays spare, its bytes not counted; the
// error says the refusals once (refusals). t.mu is held.
func (t *Tier) flushSpares() (uintptr, error) {
	sp := &t.spare
	var kept []devBlock // the refusal's path: it may allocate
	var r refusals
	free := func(d devBlock) {
		err := t.mem.heap.Free(d.p)
		if err == nil {
			return
		}
		keep := heapKept(err)
		r.note(err, keep)
		if keep {
			kept = append(kept, d)
		}
	}
	for len(sp.runs) > 0 {
		free(t.popRun())
	}
	for i := range sp.lists {
		l := &sp.lists[i]
		for _, p := range l.ps {
			free(devBlock{p, l.size})
		}
		clear(l.ps)
		l.ps = l.ps[:0]
	}
	n := sp.bytes
	sp.bytes = 0
	for _, d := range kept {
		sp.add(d)
		sp.bytes += d.size
	}
	n -= sp.bytes
	return n, r.err("spare VRAM")
}
