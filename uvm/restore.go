package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Restore: bringing blocks back to the device, for an Acquire that misses and for Prefetch. A
// restore makes room in the budget (victims.go), gives each block VRAM (a spare block of its size,
// else the device heap: devAlloc), and copies the host copies in one batch on the H2D stream,
// behind the evictions still writing them. The user's stream waits on the batch's event.
//
// Invariants: on failure no block has moved (the VRAM given goes back, behind the H2D stream once a
// copy may have been queued); the blocks being restored are marked chosen, so that no eviction made
// for their room drops the host copies their copies read.

// restoring is a restore being built in steps, so that Prefetch can check its handles a chunk
// at a time and start the copies of the first chunk before it has looked at the last handle:
// begin, then add (making room for the blocks first) any number of times, then finish, or
// abort on an error. The blocks of a restore are marked chosen until it finishes or aborts, so
// that no eviction it makes for room drops the host copies its copies read. A block that add
// gives VRAM counts in t.acct.device from then on, so that makeRoom for the next chunk sees it.
// t.mu is held throughout.
type restoring struct {
	// The copies from the host buffers (t.scratch.rjobs: an eviction for room uses
	// t.scratch.jobs). Once a launch was tried, the VRAM goes back behind the H2D stream on
	// abort.
	launcher
	ids []BlockID // the blocks: all of them from the start for restore, as they come for Prefetch
	// kept are the blocks of a Prefetch already on the device (and not acquired), marked chosen
	// until it finishes or aborts, so that the room it makes for the others does not evict them.
	kept []BlockID
}

// restore brings the blocks ids (live, not on the device, need bytes together, marked chosen
// by the caller) to the device in one batch on the H2D stream, making room first (see
// restoring). On failure no block has moved.
func (t *Tier) restore(ids []BlockID, need uintptr, cause Cause) error {
	r := t.beginRestore(ids)
	if err := t.addRestore(&r, ids, need); err != nil {
		return errors.Join(err, t.abortRestore(&r))
	}
	_, _, err := t.finishRestore(&r, cause)
	return err
}

// Prefetch brings the blocks hs to the device ahead of use, in one batch, without waiting:
// stream s is made to wait for the copies, so work queued on s after Prefetch sees the blocks.
// The blocks are not acquired: they are evictable as soon as they arrive, coldest last (the
// policy records the prefetch as a use). Blocks already on the device are not copied, and the
// room made for the others never evicts them. Errors as for Acquire, an error matching
// cuda.ErrCapturing whenever s is capturing a CUDA graph, and ErrTooLarge for more bytes than
// the budget (the blocks not acquired, on the device already or not); on an error none of the
// blocks has moved (blocks evicted to make room for them stay evicted), but for a refusal of
// s's wait for them (the driver's, or a capture begun on s meanwhile): the blocks are on the
// device then, and work on s must not count on them.
func (t *Tier) Prefetch(hs []Handle, s cuda.Stream) error { return faulted(t.prefetch(hs, s)) }

// prefetch is Prefetch, its error not yet made to match ErrDeviceFault.
func (t *Tier) prefetch(hs []Handle, s cuda.Stream) error {
	t.mu.Lock()
	defer t.unlock("Prefetch")
	if t.closed {
		return ErrClosed
	}
	if err := t.checkStream(s); err != nil { // as Acquire: every time (streams.go)
		return err
	}
	if err := t.notCapturing(s, "Prefetch", 0); err != nil {
		return err
	}
	r := t.beginRestore(t.scratch.one[:0])
	r.kept = t.scratch.kept[:0]
	defer t.unkeep(&r) // before the unlock's checks
	err := t.prefetchChunks(&r, hs)
	t.scratch.one = r.ids[:0]
	if err != nil {
		return errors.Join(err, t.abortRestore(&r))
	}
	if len(r.ids) == 0 {
		return nil
	}
	ev, copied, err := t.finishRestore(&r, CausePrefetch)
	if err != nil || !copied {
		return err
	}
	// One wait covers the batch: every copy of it is before its event.
	captured, err := t.waitPrefetch(s, ev)
	if captured != nil {
		return captured
	}
	if err != nil { // out of the gate: refusedStream asks the driver in a gate of its own
		return t.refusedStream(s, fmt.Sprintf("stream %#x waits for a prefetch", s), err)
	}
	return nil
}

// waitPrefetch makes s wait for ev, a prefetch's batch, unless a capture holds s (its refusal:
// captured; the driver's refusal of the wait: err). The check and the wait hold the capture
// gate: the check before the restore held none, and a capture begun on s since would take the
// wait for a node of its graph (the driver refuses a wait for an event recorded outside the
// capture, and invalidates the capture); one begun through package cuda now waits for the
// wait. t.mu is held.
func (t *Tier) waitPrefetch(s cuda.Stream, ev cuda.Event) (captured, err error) {
	icuda.HoldCaptureBegins()
	defer icuda.ReleaseCaptureBegins()
	if err := t.notCapturing(s, "Prefetch", 0); err != nil {
		return err, nil
	}
	return nil, t.dev.StreamWaitEvent(uintptr(s), uintptr(ev))
}

// prefetchChunks adds the blocks of hs that are not on the device to r. The handles are
// checked a chunk at a time, each chunk restored (room made, copies queued) before the next is
// checked, so that the device starts copying before the last handle is looked at: a first
// pass over 16,384 handles delayed the first copy by 80 µs or more (BenchmarkBlockCost), more
// than the slack a 64 MiB batch of 4 KiB blocks has at 48 GB/s.
func (t *Tier) prefetchChunks(r *restoring, hs []Handle) error {
	var total uintptr
	for start, chunk := 0, firstLaunchJobs; start < len(hs); start, chunk = start+chunk, nextLaunch(chunk) {
		first := len(r.ids)
		need, kept, err := t.choosePrefetch(r, hs[start:min(start+chunk, len(hs))])
		if err != nil {
			return err
		}
		total += kept
		if len(r.ids) == first {
			continue
		}
		if total += need; total > t.mem.budget {
			return fmt.Errorf("%w: a prefetch of more than %d bytes, budget %d", ErrTooLarge, total, t.mem.budget)
		}
		if err := t.addRestore(r, r.ids[first:], need); err != nil {
			return err
		}
	}
	return nil
}

// choosePrefetch adds to r.ids the blocks of hs that are not on the device, skipping
// duplicates, marks them chosen and returns their bytes (need). The blocks of hs already on the
// device and not acquired are marked chosen too, in r.kept, and their bytes returned (kept): the
// room made for the others must not evict them (they are the prefetch's own). It refuses bad
// handles, and a block acquired on the host for writing (ErrAcquired).
func (t *Tier) choosePrefetch(r *restoring, hs []Handle) (need, kept uintptr, err error) {
	for _, h := range hs {
		id, b, err := t.lookup(h)
		if err == nil && b.hostWrite && b.dev == 0 {
			err = fmt.Errorf("%w: block %#x is acquired on the host for writing", ErrAcquired, uint64(h))
		}
		if err != nil {
			return need, kept, err
		}
		switch {
		case b.chosen: // counted once
		case b.dev == 0:
			b.chosen = true
			r.ids = append(r.ids, id)
			need += b.size
		case b.pins == 0:
			b.chosen = true
			r.kept = append(r.kept, id)
			kept += b.size
		}
	}
	return need, kept, nil
}

// unkeep clears the marks of the blocks of a Prefetch that were on the device already (r.kept),
// and keeps the slice for the next Prefetch.
func (t *Tier) unkeep(r *restoring) {
	t.unchoose(r.kept)
	t.scratch.kept = r.kept[:0]
	r.kept = nil
}

// beginRestore starts a restore of the blocks ids, and of the blocks added to ids later.
func (t *Tier) beginRestore(ids []BlockID) restoring {
	return restoring{launcher: newLauncher(t.scratch.rjobs), ids: ids}
}

// addRestore gives the blocks ids (of r, live, not on the device) VRAM and queues their copies,
// a launch at a time, after making room for their need bytes. On an error the caller aborts.
func (t *Tier) addRestore(r *restoring, ids []BlockID, need uintptr) error {
	if err := t.makeRoom(need); err != nil {
		return err
	}
	for _, id := range ids {
		b := &t.blocks[id]
		p, err := t.devAlloc(b.size)
		if err != nil {
			return err
		}
		b.dev = p
		t.acct.device += b.size
		if b.fresh {
			continue
		}
		if b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) { // the host copy is still being written
			if err := t.dev.StreamWaitEvent(uintptr(t.engine.h2d), uintptr(b.evictEv)); err != nil {
				return fmt.Errorf("uvm: restore waits for an eviction: %w", err)
			}
		}
		if r.add(CopyJob{Dst: p, Src: b.hostDev, Len: int(b.size)}) { // start the copies while the rest is prepared
			if err := t.launch(&r.launcher, t.engine.h2d); err != nil {
				t.st.Failures++
				return fmt.Errorf("uvm: restore of a batch of blocks: %w", err)
			}
		}
	}
	return nil
}

// finishRestore queues the last copies of r and the batch's event, and records the blocks as
// restored. It returns the event, and whether any copy was queued. On an error it aborts: no
// block has moved.
func (t *Tier) finishRestore(r *restoring, cause Cause) (cuda.Event, bool, error) {
	var ev cuda.Event
	copied := len(r.jobs) > 0 || r.tried
	if copied {
		err := t.launch(&r.launcher, t.engine.h2d)
		if err == nil {
			ev, err = t.pushEvent(dirH2D, completion{})
		}
		if err != nil {
			n := len(r.ids)
			aerr := t.abortRestore(r)
			t.st.Failures++
			err = fmt.Errorf("uvm: restore of %s: %w", units.Count(uint64(n), "block"), err)
			return 0, false, errors.Join(err, aerr)
		}
	}
	t.scratch.rjobs = r.jobs[:0]
	t.restored(r.ids, ev, cause)
	return ev, copied, nil
}

// restored records the blocks ids as on the device, those with host copies restored by the
// batch whose event is ev; for CausePrefetch the policy records a use of each.
func (t *Tier) restored(ids []BlockID, ev cuda.Event, cause Cause) {
	now := t.now()
	used := cause == CausePrefetch
	for _, id := range ids {
		b := &t.blocks[id]
		b.chosen = false
		if b.fresh {
			b.fresh = false
			t.acct.fresh -= b.size
		} else {
			t.acct.hostOnly -= b.size
			b.readySeq, b.readyEv = t.batches.issued[dirH2D], ev
			t.unreadHost(b) // this batch is after the failed copies on the H2D stream
			t.moved(id, b, true, cause, false, now)
		}
		if used {
			t.policy.Used(id)
		}
	}
}

// abortRestore gives back the VRAM the blocks of r got (behind the H2D stream once a copy was
// tried) and clears their marks: none of them has moved. Its error is the heap's refusal of VRAM
// given back to it (putSpare), which the caller joins to its own.
func (t *Tier) abortRestore(r *restoring) error {
	t.scratch.rjobs = r.jobs[:0]
	var err error
	if r.tried {
		err = t.undoRestore(r.ids)
	} else {
		var refused refusals
		for _, id := range r.ids { // nothing is queued yet: spare at once
			if b := &t.blocks[id]; b.dev != 0 {
				p := b.dev
				b.dev = 0
				t.acct.device -= b.size
				t.putSpare(p, b.size, &refused)
			}
		}
		err = refused.err("VRAM the tier gave back")
	}
	t.unchoose(r.ids)
	return err
}

// undoRestore gives back the VRAM of a restore that failed. Copies into it may be queued on
// the H2D stream, so it goes back behind that stream, or after a synchronize of it; when the
// driver refuses both, it is held back (heldback.go). Those copies may also still read the
// blocks' host buffers, which the blocks keep: each block with one takes the batch as its
// restore (readySeq, readyEv), so that a Free gives the buffer back to the pool, and
// AcquireHost for writing hands it to Go, only behind that batch; with no batch (both refused),
// each is marked hostRead (readHost), and a Free holds its buffer back. Its error is the heap's
// refusal of VRAM given back to it after the synchronize (complete).
func (t *Tier) undoRestore(ids []BlockID) error {
	c := completion{}
	for _, id := range ids {
		if b := &t.blocks[id]; b.dev != 0 {
			c.dev = append(c.dev, devBlock{b.dev, b.size})
			b.dev = 0
			t.acct.device -= b.size
		}
	}
	ev, err := t.pushEvent(dirH2D, c)
	if err != nil {
		if t.dev.StreamSynchronize(uintptr(t.engine.h2d)) != nil {
			t.holdBack(c) // the copies may still write it (heldback.go)
			t.readHost(ids)
			return nil
		}
		return t.complete(c)
	}
	for _, id := range ids {
		if b := &t.blocks[id]; b.host != nil {
			b.readySeq, b.readyEv = t.batches.issued[dirH2D], ev
		}
	}
	return nil
}

// readHost marks the blocks ids that have host buffers as read by copies of a failed restore
// that nothing orders (hostRead): neither its batch's event nor a synchronize of the H2D stream
// could be had. A copy queued before a fault may, as far as the driver documents, still run
// (it says only that every later call fails), so the buffer leaves the block only held back.
func (t *Tier) readHost(ids []BlockID) {
	for _, id := range ids {
		if b := &t.blocks[id]; b.host != nil && !b.hostRead {
			b.hostRead = true
			t.held.reads++
		}
	}
}

// devAlloc takes VRAM for a block: a spare block of its size, else from the device heap. When
// the heap refuses, it gives the spare blocks back to the heap and retries; then it finishes
// the evictions in flight (waiting for their copies) and retries; then it evicts the coldest
// blocks, size bytes of them and twice as many each round after, waiting for their copies
// before each retry, until the heap takes the block or nothing is left to evict
// (ErrAllPinned). The heap can be full well within the budget: every size class takes pages of
// its own (64 KiB, 512 KiB or a whole 2 MiB segment), small, medium and large pages do not
// share a segment, and the tier's own heap has room for a quarter more than the budget and
// 4 MiB (heapCapacity). Evicting a block frees no segment while other blocks share its page,
// so a fixed number of rounds of size bytes failed with the heap's out of memory, the budget
// half used (TestFakeFragmentedHeap4Streams); the doubling bounds the rounds by the log of
// what there is to evict, and evicts at most about twice what the last round needed.
func (t *Tier) devAlloc(size uintptr) (cuda.DevicePtr, error) {
	want := size // what the next round evicts
	for try := 0; ; try++ {
		if p := t.takeSpare(size); p != 0 {
			return p, nil
		}
		p, err := t.mem.heap.Alloc(int(size), t.engine.h2d)
		if err == nil {
			return p, nil
		}
		if outOfMemory(err) && t.spare.bytes > 0 { // spares of other sizes hold the memory
			if _, ferr := t.flushSpares(); ferr != nil {
				return 0, errors.Join(err, ferr)
			}
			if p, err = t.mem.heap.Alloc(int(size), t.engine.h2d); err == nil {
				return p, nil
			}
		}
		if !outOfMemory(err) {
			return 0, fmt.Errorf("uvm: device memory for a block of %d bytes: %w", size, err)
		}
		t.st.HeapPressure++
		if try > 0 { // finishing the evictions in flight was not enough: evict more
			if t.pickVictims(want) == 0 {
				t.unchoose(t.scratch.victims)
				return 0, fmt.Errorf("%w: the device heap refused %d bytes and no block on the device can be evicted "+
					"(%d bytes on the device, %d of them acquired): %w", ErrAllPinned, size, t.acct.device, t.acct.pinned, err)
			}
			if eerr := t.evict(t.scratch.victims, CauseHeapPressure); eerr != nil {
				return 0, eerr
			}
			want = min(2*want, t.mem.budget)
		}
		if derr := t.drain(); derr != nil {
			return 0, derr
		}
	}
}

func outOfMemory(err error) bool { return errors.Is(err, pinmalloc.ErrOutOfMemory) }
