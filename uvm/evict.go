package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Eviction: moving blocks off the device in one batch on the D2H stream, for room in the budget
// (makeRoom), for the device heap (devAlloc, the pressure hook), or on request (Evict). Dirty
// blocks are copied to host buffers after the D2H stream waited for their uses (release.go); clean
// ones, whose host copy is valid, are dropped without a copy. Their VRAM is retired behind the
// batch's event (completion.go).
//
// Invariants: only evictable blocks are evicted (on the device, not acquired); on failure no block
// has moved, and the copies already queued into host buffers the blocks keep are waited for; the
// blocks are marked chosen while the batch is built.

// evicting is an eviction being built: begin, add each block, then finish, or abort on an
// error (the one the step returned). Its blocks are marked chosen until it finishes or aborts,
// so that hostAlloc does not drop their host copies for room. t.mu is held throughout.
type evicting struct {
	launcher            // the copies of the dirty blocks to their host buffers (t.scratch.jobs)
	ids      []BlockID  // the blocks: all of them from the start for evict, as they come for Evict
	done     completion // what the batch gives up once its copies are done: the blocks' VRAM
}

// evict moves the blocks ids (evictable) off the device in one batch: dirty ones are copied to
// host buffers on the D2H stream after it waited for their uses; clean ones are dropped. The
// caller marks ids chosen (pickVictims), and evict clears the marks when it returns. On failure
// no block has moved. t.mu is held.
func (t *Tier) evict(ids []BlockID, cause Cause) error {
	e := t.beginEvict(ids, len(ids))
	for _, id := range ids {
		if err := t.addEvict(&e, id); err != nil {
			return t.abortEvict(&e, err)
		}
	}
	return t.finishEvict(&e, cause)
}

// Evict moves the blocks hs off the device now, in one batch (dirty ones are copied to the
// host, clean ones dropped), without waiting for the copies. Blocks not on the device are
// skipped. Errors: ErrAcquired for a block acquired on the device (nothing moves), ErrHostFull,
// and the copy's errors, after which every block is where it was.
func (t *Tier) Evict(hs []Handle) error { return faulted(t.evictHandles(hs)) }

// evictHandles is Evict, its error not yet made to match ErrDeviceFault.
func (t *Tier) evictHandles(hs []Handle) error {
	t.mu.Lock()
	defer t.unlock("Evict")
	if t.closed {
		return ErrClosed
	}
	if err := t.poll(); err != nil {
		return err
	}
	e := t.beginEvict(t.scratch.one[:0], len(hs))
	err := t.addHandles(&e, hs)
	t.scratch.one = e.ids[:0]
	if err != nil {
		return t.abortEvict(&e, err)
	}
	return t.finishEvict(&e, CauseExplicit)
}

// addHandles adds the blocks of the handles hs to e, checking each handle as it comes to it
// (ErrInvalidHandle, ErrAcquired), so that the first copies are queued before the last handle
// is looked at. It skips blocks not on the device and duplicates, and marks the blocks chosen.
func (t *Tier) addHandles(e *evicting, hs []Handle) error {
	for _, h := range hs {
		id, b, err := t.lookup(h)
		if err != nil {
			return err
		}
		if b.pins > 0 {
			return fmt.Errorf("%w: Evict of %#x", ErrAcquired, uint64(h))
		}
		if b.dev == 0 || b.chosen {
			continue
		}
		b.chosen = true
		e.ids = append(e.ids, id)
		if err := t.addEvict(e, id); err != nil {
			return err
		}
	}
	return nil
}

// beginEvict starts an eviction of the blocks ids, and of the blocks added to ids later: n in
// all at most.
func (t *Tier) beginEvict(ids []BlockID, n int) evicting {
	t.rel.waits = t.rel.waits[:0]
	return evicting{launcher: newLauncher(t.scratch.jobs), ids: ids, done: completion{dev: t.devList(n)}}
}

// addEvict adds block id (on the device, marked chosen) to e: its VRAM goes back when the
// batch is done, and if it is dirty its bytes are copied to a host buffer (hostAlloc gives it
// one), a launch at a time.
func (t *Tier) addEvict(e *evicting, id BlockID) error {
	b := &t.blocks[id]
	t.addWaits(b)
	e.done.dev = append(e.done.dev, devBlock{b.dev, b.size})
	e.done.devBytes += b.size
	if b.clean() {
		return nil
	}
	if b.host == nil {
		if err := t.hostAlloc(id, b); err != nil {
			return err
		}
	}
	if e.add(CopyJob{Dst: b.hostDev, Src: b.dev, Len: int(b.size)}) { // start the copies while the rest is prepared
		return t.launchEvict(e)
	}
	return nil
}

// launchEvict queues the copies of e not queued yet on the D2H stream, after the waits for the
// uses of the blocks added since the last launch.
func (t *Tier) launchEvict(e *evicting) error {
	err := t.queueWaits(t.engine.d2h)
	if err == nil {
		err = t.launch(&e.launcher, t.engine.d2h)
	}
	if err != nil {
		return t.evictFailed(e, err)
	}
	t.rel.waits = t.rel.waits[:0] // a stream's waits hold for all later work
	return nil
}

// finishEvict queues the last copies of e and the batch's event, and records the blocks as
// evicted. On an error it aborts: no block has moved.
func (t *Tier) finishEvict(e *evicting, cause Cause) error {
	if err := t.launchEvict(e); err != nil {
		return t.abortEvict(e, err)
	}
	t.scratch.jobs = e.jobs[:0]
	if len(e.ids) == 0 {
		t.putDevList(e.done.dev)
		return nil
	}
	ev, err := t.pushEvent(dirD2H, e.done)
	if err != nil {
		return t.abortEvict(e, t.evictFailed(e, err))
	}
	t.evicted(e.ids, ev, cause)
	return nil
}

// evictFailed counts a batch whose copies could not be queued and says how far it got.
func (t *Tier) evictFailed(e *evicting, err error) error {
	t.st.Failures++
	return fmt.Errorf("uvm: eviction of %s (%d copied): %w", units.Count(uint64(len(e.ids)), "block"), e.queued, err)
}

// abortEvict ends an eviction that failed with err, and returns err: the blocks stay where
// they were, with their marks cleared. Copies into host buffers the blocks keep may be queued,
// by a launch that failed too (a Mover may queue some of its copies and then fail): it waits
// for them (settleCopies).
func (t *Tier) abortEvict(e *evicting, err error) error {
	t.scratch.jobs = e.jobs[:0]
	t.putDevList(e.done.dev)
	t.unchoose(e.ids)
	if !e.tried {
		return err
	}
	return t.settleCopies(e.ids, err)
}

// settleCopies waits for the D2H stream, where a batch that failed with err may have queued
// copies into the host buffers of blocks ids, so that no such buffer is handed on under a copy
// (dropHostCopies gives a dirty block's buffer to another block), and returns err. When the
// wait fails, the blocks whose host copy is not valid let go of their host buffers, which are
// held back (heldback.go), and the error says so besides, the wait's driver error said only
// when it is not err's (a sticky error refuses the launch and the wait alike). t.mu is held.
func (t *Tier) settleCopies(ids []BlockID, err error) error {
	serr := t.dev.StreamSynchronize(uintptr(t.engine.d2h))
	if serr == nil {
		return err
	}
	var c completion
	for _, id := range ids {
		if b := &t.blocks[id]; b.host != nil && !b.hostValid {
			c.host = append(c.host, b.host)
			b.host, b.hostDev, b.hostLent = nil, 0, false
			t.acct.hostHeld -= b.size
		}
	}
	if len(c.host) > 0 {
		t.holdBack(c)
	}
	held := units.Count(uint64(len(c.host)), "host buffer")
	if errkind.Same(err, serr) {
		return fmt.Errorf("%w; its copies could not be waited for either, so the tier holds back %s",
			err, held)
	}
	return fmt.Errorf("%w; its copies could not be waited for, so the tier holds back %s: %w",
		err, held, serr)
}

// evicted records the blocks ids as moved off the device by the batch whose event is ev: the
// host copies of the dirty ones are valid once it completes.
func (t *Tier) evicted(ids []BlockID, ev cuda.Event, cause Cause) {
	now := t.now()
	for _, id := range ids {
		b := &t.blocks[id]
		b.chosen = false
		clean := b.clean()
		if !clean {
			b.evictSeq, b.evictEv, b.hostValid = t.batches.issued[dirD2H], ev, true
		}
		b.dev = 0
		t.acct.device -= b.size
		t.acct.hostOnly += b.size
		t.putReleases(b)
		t.policy.Evicted(id)
		t.moved(id, b, false, cause, clean, now)
	}
}
