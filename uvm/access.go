package uvm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Acquire makes block h resident and returns its device address for work queued on stream s
// from now until Release(h, s). It does not wait for a copy: a block brought back is copied
// on the tier's H2D stream and s is made to wait for it. Mode Write marks the host copy stale.
// The block stays acquired (never moved) until as many Releases on s as Acquires on s.
// Errors: ErrInvalidHandle, ErrInvalidStream (a stream the driver does not know; the tier
// asks it once per stream, streams.go), ErrAllPinned (no room: the budget is held by acquired
// blocks), ErrAcquired (the host holds the block for writing, or for reading and m is Write),
// and the errors of the copy, the device heap and the driver, after which the block is where
// it was.
func (t *Tier) Acquire(h Handle, s cuda.Stream, m Mode) (cuda.DevicePtr, error) {
	t.mu.Lock()
	p, err := t.acquire(h, s, m)
	t.mu.Unlock()
	return p, err
}

// AcquireContext is Acquire, except that when every evictable byte is acquired
// (ErrAllPinned) it waits for room instead of failing: it tries again after each Release,
// ReleaseHost or Free of the tier, and at least every allPinnedRetry (memory another user of a
// shared device heap frees is not seen otherwise), until it succeeds, fails otherwise, or ctx
// is done: then ctx's error is returned, joined with ErrAllPinned. Like Acquire, it does not
// wait for copies.
func (t *Tier) AcquireContext(ctx context.Context, h Handle, s cuda.Stream, m Mode) (cuda.DevicePtr, error) {
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		t.mu.Lock()
		p, err := t.acquire(h, s, m)
		if err == nil || !errors.Is(err, ErrAllPinned) {
			t.mu.Unlock()
			return p, err
		}
		if t.wake == nil {
			t.wake = make(chan struct{})
		}
		wake := t.wake
		t.mu.Unlock()
		if retry == nil {
			retry = time.NewTimer(allPinnedRetry)
		} else {
			retry.Reset(allPinnedRetry)
		}
		select {
		case <-wake:
		case <-retry.C:
		case <-ctx.Done():
			return 0, errors.Join(err, ctx.Err())
		}
	}
}

// allPinnedRetry is how often AcquireContext tries again while it waits for room.
const allPinnedRetry = 10 * time.Millisecond

// acquire is Acquire with t.mu held.
func (t *Tier) acquire(h Handle, s cuda.Stream, m Mode) (cuda.DevicePtr, error) {
	if t.closed {
		return 0, ErrClosed
	}
	if m > Write {
		return 0, fmt.Errorf("%w: %v", ErrInvalidOptions, m)
	}
	id, b, err := t.lookup(h)
	if err != nil {
		return 0, err
	}
	if b.hostPins > 0 && (b.hostWrite || m == Write) {
		return 0, fmt.Errorf("%w: block %#x is acquired on the host", ErrAcquired, uint64(h))
	}
	if err := t.checkStream(s); err != nil { // hit or miss (streams.go)
		return 0, err
	}
	if b.dev == 0 {
		t.st.Misses++
		t.victims = t.victims[:0]
		ids := append(t.one[:0], id)
		b.chosen = true
		if err := t.restore(ids, b.size, CauseAcquire); err != nil {
			return 0, err
		}
	} else {
		t.st.Hits++
	}
	if b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		if err := t.dev.StreamWaitEvent(s, b.readyEv); err != nil {
			return 0, fmt.Errorf("uvm: stream %#x waits for block %#x: %w", s, uint64(h), err)
		}
	}
	if m == Write {
		b.hostValid = false
	}
	if b.pins == 0 {
		t.policy.Pinned(id)
		t.acct.pinned += b.size
		t.acct.pinnedBlocks++
	}
	b.pins++
	for i := range b.uses {
		if b.uses[i].s == s {
			b.uses[i].n++
			return b.dev, nil
		}
	}
	b.uses = append(b.uses, use{s: s, n: 1})
	return b.dev, nil
}

// Release ends one use of block h on stream s: an event recorded on s now marks the end of
// the work that uses it, and the block is moved only after that event. Errors: ErrNotAcquired
// when the block is not acquired, ErrWrongStream when it is acquired on other streams only
// (the use goes on). When the event cannot be recorded (s was destroyed, say), the use ends
// anyway, after the tier has waited for the work on s (or on the whole device), and the error
// says the block was released (wrapping ErrInvalidStream when the driver refused s;
// streams.go).
func (t *Tier) Release(h Handle, s cuda.Stream) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, b, err := t.lookup(h)
	if err != nil {
		return err
	}
	if b.pins == 0 {
		return fmt.Errorf("%w: Release of %#x", ErrNotAcquired, uint64(h))
	}
	k := -1
	for i := range b.uses {
		if b.uses[i].s == s {
			k = i
		}
	}
	if k < 0 {
		return fmt.Errorf("%w: %#x released on stream %#x, acquired on %#x", ErrWrongStream, uint64(h), s, b.uses[0].s)
	}
	if err = t.recordRelease(b, s); err != nil {
		err = t.unordered(h, s, err)
	}
	if b.uses[k].n--; b.uses[k].n == 0 {
		b.uses[k] = b.uses[len(b.uses)-1]
		b.uses = b.uses[:len(b.uses)-1]
	}
	if b.pins--; b.pins == 0 {
		t.acct.pinned -= b.size
		t.acct.pinnedBlocks--
		t.policy.Used(id)
		t.signal()
	}
	return err
}

// AcquireHost returns the block's bytes as a []byte of pinned host memory for Go to read
// (Read) or fill (Write), valid until ReleaseHost. A block whose newest bytes are on the device
// is copied to the host first, and AcquireHost waits for that copy. With Write the device copy
// is dropped (the next Acquire brings the new bytes back). Several readers may hold a block;
// a writer excludes every other acquisition. Errors: ErrInvalidHandle, ErrAcquired (acquired
// on the device, or on the host by a writer or, for Write, a reader), ErrHostFull.
func (t *Tier) AcquireHost(h Handle, m Mode) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if m > Write {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, m)
	}
	id, b, err := t.lookup(h)
	if err != nil {
		return nil, err
	}
	if b.pins > 0 || (b.hostPins > 0 && (b.hostWrite || m == Write)) {
		return nil, fmt.Errorf("%w: block %#x", ErrAcquired, uint64(h))
	}
	if err := t.poll(); err != nil {
		return nil, err
	}
	switch {
	case b.fresh:
		if err := t.hostAlloc(id, b); err != nil {
			return nil, err
		}
		b.fresh, b.hostValid = false, true
		t.acct.fresh -= b.size
		t.acct.hostOnly += b.size
	case !b.clean() && b.dev != 0:
		if err := t.copyToHost(id, b); err != nil {
			return nil, err
		}
	}
	// The host copy is valid; wait for a copy still writing it (an eviction), and for a
	// writer, for one still reading it (a restore).
	if b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) {
		if err := t.dev.EventSynchronize(b.evictEv); err != nil {
			return nil, fmt.Errorf("uvm: wait for the eviction of %#x: %w", uint64(h), err)
		}
	}
	if m == Write && b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		if err := t.dev.EventSynchronize(b.readyEv); err != nil {
			return nil, fmt.Errorf("uvm: wait for the restore of %#x: %w", uint64(h), err)
		}
	}
	if m == Write && b.dev != 0 {
		// The device copy becomes stale: give its VRAM back behind its uses.
		t.waits = t.waits[:0]
		t.addWaits(b)
		if err := t.retire(completion{dev: []devBlock{{b.dev, b.size}}}); err != nil {
			return nil, err
		}
		t.putReleases(b)
		t.policy.Evicted(id)
		b.dev = 0
		t.acct.device -= b.size
		t.acct.hostOnly += b.size
	}
	b.hostPins++
	b.hostWrite = m == Write
	return b.host[:b.n:b.n], nil
}

// copyToHost copies a dirty block's device bytes to its host buffer on the D2H stream, after
// its uses, and waits for the copy. The block stays on the device, clean. t.mu is held.
func (t *Tier) copyToHost(id BlockID, b *block) error {
	if b.host == nil {
		if err := t.hostAlloc(id, b); err != nil {
			return err
		}
	}
	t.waits = t.waits[:0]
	t.addWaits(b)
	err := t.queueWaits(t.d2h)
	if err == nil {
		err = t.mover.Copy(append(t.jobs[:0], CopyJob{Dst: b.hostDev, Src: b.dev, Len: b.size}), t.d2h)
	}
	var ev cuda.Event
	if err == nil {
		ev, err = t.pushEvent(dirD2H, completion{})
	}
	if err == nil {
		err = t.dev.EventSynchronize(ev)
	}
	if err != nil {
		t.st.Failures++
		return fmt.Errorf("uvm: copy of %#x to the host: %w", uint64(t.handle(id)), err)
	}
	b.hostValid = true
	t.st.Out[CauseHost].Blocks++
	t.st.Out[CauseHost].Bytes += uint64(b.size)
	return nil
}

// ReleaseHost ends a use of the []byte from AcquireHost. Errors: ErrNotAcquired.
func (t *Tier) ReleaseHost(h Handle) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, b, err := t.lookup(h)
	if err != nil {
		return err
	}
	if b.hostPins == 0 {
		return fmt.Errorf("%w: ReleaseHost of %#x", ErrNotAcquired, uint64(h))
	}
	if b.hostPins--; b.hostPins == 0 {
		b.hostWrite = false
		t.signal()
	}
	return nil
}

// Prefetch brings the blocks hs to the device ahead of use, in one batch, without waiting:
// stream s is made to wait for the copies, so work queued on s after Prefetch sees the blocks.
// The blocks are not acquired: they are evictable as soon as they arrive, coldest last (the
// policy records the prefetch as a use). Blocks already on the device are skipped. Errors as
// for Acquire, and ErrTooLarge for more bytes than the budget; on an error none of the blocks
// has moved (blocks evicted to make room for them stay evicted).
func (t *Tier) Prefetch(hs []Handle, s cuda.Stream) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	// The handles are checked a chunk at a time, each chunk restored (room made, copies
	// queued) before the next is checked, so that the device starts copying before the last
	// handle is looked at: a first pass over 16,384 handles delayed the first copy by 80 µs
	// or more (BenchmarkBlockCost), more than the slack a 64 MiB batch of 4 KiB blocks has at
	// 48 GB/s. Duplicates and blocks on the device are skipped; the blocks stay marked chosen
	// until the restore finishes or aborts.
	ids := t.one[:0]
	var need uintptr
	r := t.beginRestore()
	fail := func(err error) error {
		t.abortRestore(&r, ids)
		t.one = ids[:0]
		return err
	}
	if err := t.checkStream(s); err != nil { // as Acquire: every time (streams.go)
		return err
	}
	chunk := firstLaunchJobs
	for start := 0; start < len(hs); {
		end := min(start+chunk, len(hs))
		first := len(ids)
		var chunkNeed uintptr
		for _, h := range hs[start:end] {
			id, b, err := t.lookup(h)
			if err == nil && b.hostWrite && b.dev == 0 {
				err = fmt.Errorf("%w: block %#x is acquired on the host for writing", ErrAcquired, uint64(h))
			}
			if err != nil {
				return fail(err)
			}
			if b.dev == 0 && !b.chosen {
				b.chosen = true // counted once
				ids = append(ids, id)
				chunkNeed += b.size
			}
		}
		start, chunk = end, min(2*chunk, launchJobs)
		if len(ids) == first {
			continue
		}
		if need += chunkNeed; need > t.budget {
			return fail(fmt.Errorf("%w: a prefetch of more than %d bytes, budget %d", ErrTooLarge, need, t.budget))
		}
		if err := t.addRestore(&r, ids[first:], chunkNeed); err != nil {
			return fail(err)
		}
	}
	t.one = ids[:0]
	if len(ids) == 0 {
		return nil
	}
	ev, copied, err := t.finishRestore(&r, ids, CausePrefetch)
	if err != nil {
		return err
	}
	if copied { // one wait covers the batch: every copy of it is before its event
		if err := t.dev.StreamWaitEvent(s, ev); err != nil {
			return fmt.Errorf("uvm: stream %#x waits for a prefetch: %w", s, err)
		}
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
