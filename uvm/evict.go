package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Eviction: moving blocks off the device.

// evict moves the blocks ids (evictable) off the device in one batch: dirty ones are copied to
// host buffers on the D2H stream after it waited for their uses; clean ones are dropped. The
// caller marks ids chosen (pickVictims), so that hostAlloc does not drop their host copies for
// room, and evict clears the marks when it returns. On failure no block has moved. t.mu is
// held.
func (t *Tier) evict(ids []BlockID, cause Cause) error { return t.evictBatch(ids, nil, cause) }

// evictBatch is evict of ids, or, when hs is not nil, of the blocks of the handles hs (for
// Evict): it checks each handle as it comes to it (ErrInvalidHandle, ErrAcquired), skipping
// blocks not on the device and duplicates, and marks the blocks chosen, so that the first
// copies are queued before the last handle is looked at; a bad handle fails the batch like a
// failed copy (no block has moved).
func (t *Tier) evictBatch(ids []BlockID, hs []Handle, cause Cause) error {
	jobs := t.scratch.jobs[:0]
	t.rel.waits = t.rel.waits[:0]
	n := len(ids)
	if hs != nil {
		ids, n = t.scratch.one[:0], len(hs)
	}
	c := completion{dev: t.devList(n)}
	copied := 0 // jobs whose copies are queued
	launchAt := firstLaunchJobs
	var err error
	ownErr := false // err is hostAlloc's (ErrHostFull) or a handle's, not a failed copy
	for i := 0; i < n; i++ {
		var id BlockID
		if hs != nil {
			var b *block
			if id, b, err = t.lookup(hs[i]); err == nil && b.pins > 0 {
				err = fmt.Errorf("%w: Evict of %#x", ErrAcquired, uint64(hs[i]))
			}
			if err != nil {
				ownErr = true
				break
			}
			if b.dev == 0 || b.chosen {
				continue
			}
			b.chosen = true
			ids = append(ids, id)
		} else {
			id = ids[i]
		}
		b := &t.blocks[id]
		t.addWaits(b)
		c.dev = append(c.dev, devBlock{b.dev, b.size})
		c.devBytes += b.size
		if b.clean() {
			continue
		}
		if b.host == nil {
			if err = t.hostAlloc(id, b); err != nil {
				ownErr = true
				break
			}
		}
		jobs = append(jobs, CopyJob{Dst: b.hostDev, Src: b.dev, Len: b.size})
		if len(jobs) == launchAt { // start the copies while the rest is prepared
			if err = t.queueWaits(t.engine.d2h); err == nil {
				err = t.engine.mover.Copy(jobs, t.engine.d2h)
			}
			if err != nil {
				break
			}
			copied += len(jobs)
			jobs, t.rel.waits = jobs[:0], t.rel.waits[:0] // a stream's waits hold for all later work
			launchAt = min(2*launchAt, launchJobs)
		}
	}
	t.scratch.jobs = jobs[:0]
	if err == nil {
		if err = t.queueWaits(t.engine.d2h); err == nil && len(jobs) > 0 {
			err = t.engine.mover.Copy(jobs, t.engine.d2h)
		}
		if err == nil {
			copied += len(jobs)
		}
	}
	if hs != nil {
		t.scratch.one = ids[:0]
	}
	if err == nil && len(ids) == 0 {
		t.batches.devLists = append(t.batches.devLists, c.dev[:0])
		return nil
	}
	var ev cuda.Event
	if err == nil {
		ev, err = t.pushEvent(dirD2H, c)
	}
	if err != nil {
		t.batches.devLists = append(t.batches.devLists, c.dev[:0])
		t.unchoose(ids)
		if copied > 0 { // copies into host buffers the blocks keep: let them land first
			_ = t.dev.StreamSynchronize(t.engine.d2h)
		}
		if ownErr {
			return err
		}
		t.st.Failures++
		return fmt.Errorf("uvm: eviction of %d blocks (%d copied): %w", len(ids), copied, err)
	}
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
	return nil
}

// Evict moves the blocks hs off the device now, in one batch (dirty ones are copied to the
// host, clean ones dropped), without waiting for the copies. Blocks not on the device are
// skipped. Errors: ErrAcquired for a block acquired on the device (nothing moves), ErrHostFull,
// and the copy's errors, after which every block is where it was.
func (t *Tier) Evict(hs []Handle) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if err := t.poll(); err != nil {
		return err
	}
	return t.evictBatch(nil, hs, CauseExplicit)
}
