package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The host side of a block: Go reads or writes its bytes through AcquireHost and ReleaseHost, and
// the bytes that leave the device live in buffers of the tier's pinned pool (hostAlloc), each one
// DMA range (see openPool).
//
// Invariants: a block acquired on the host for writing has no device copy while it is held; Go
// gets a host copy only once the eviction writing it has completed, and writes it only once the
// restore reading it has.
//
// A buffer Go had (hostLent) may still be read, after ReleaseHost, by copies the user queued
// from it with device.Heap (HtoDAsync): their streams are recorded on the buffer in the pool,
// which orders a free of the buffer after them, but the tier's own copies into it (an eviction,
// copyToHost) would overwrite it under them. So the tier never copies into a lent buffer: when
// a block acquired for writing makes its host copy stale (the only way to a copy into the
// buffer it has), the block lets go of it (unlendHost), behind the tier's own copies that may
// still read it, and through the pool's Free, which waits for the user's; the next copy to the
// host gets another buffer (hostAlloc). A lent buffer that is still the block's valid host copy
// is only read by the tier (a restore), and a read does not disturb the user's.

// AcquireHost returns the block's bytes as a []byte of pinned host memory for Go to read
// (Read) or fill (Write), valid until ReleaseHost. A block whose newest bytes are on the device
// is copied to the host first, and AcquireHost waits for that copy. With Write the device copy
// is dropped (the next Acquire brings the new bytes back). Several readers may hold a block;
// a writer excludes every other acquisition. A device.Heap copy queued from the []byte may
// outlive ReleaseHost (see the package documentation); one queued into it must have run before
// the block is next acquired on the device or prefetched. Errors: ErrInvalidHandle, ErrAcquired
// (acquired on the device, or on the host by a writer or, for Write, a reader), ErrHostFull.
func (t *Tier) AcquireHost(h Handle, m Mode) (_ []byte, err error) {
	start := nanotime() // latency.go
	t.mu.Lock()
	defer t.unlock("AcquireHost")
	defer func() {
		if err == nil {
			t.st.AcquireLatency.Host.record(nanotime() - start) // latency.go
		}
		err = faulted(err)
	}()
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
	if err := t.hostCurrent(id, b); err != nil {
		return nil, err
	}
	if err := t.waitHostCopies(id, b, m); err != nil {
		return nil, err
	}
	if m == Write && b.dev != 0 {
		if err := t.dropDeviceCopy(id, b); err != nil {
			return nil, err
		}
	}
	b.hostPins++
	b.hostWrite = m == Write
	b.hostLent = true
	return b.host[:b.n:b.n], nil
}

// unlendHost lets go of block id's host buffer, lent to Go (see the file comment) and about to
// go stale (b is acquired for writing): the buffer goes back to the pool behind the tier's copies
// that may still read it (a restore in flight; an eviction writing it is before any completion on
// the D2H stream), and the pool's Free hands it out again only once the streams of the user's
// copies recorded on it have passed them. When retire cannot order it (a CPU wait failed: a
// sticky error) the block keeps it, with its host copy, and the error comes back: the Acquire
// fails, and nothing is held back in silence. When retire gave it on with an error (the pool
// refused it), the block has let go of it all the same, and the error comes back. t.mu is held.
func (t *Tier) unlendHost(id BlockID, b *block) error {
	t.rel.waits = t.rel.waits[:0]
	if b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		t.addWait(relEvent{s: t.engine.h2d, ev: b.readyEv, seq: b.readySeq})
	}
	gone, err := t.retire(completion{host: [][]byte{b.host}})
	if !gone {
		return fmt.Errorf("uvm: block %#x lets go of its host buffer, lent to Go: %w",
			uint64(t.handle(id)), err)
	}
	b.host, b.hostDev, b.hostLent, b.hostValid = nil, 0, false, false
	t.acct.hostHeld -= b.size
	if err != nil {
		return fmt.Errorf("uvm: the host buffer of %#x, let go of: %w", uint64(t.handle(id)), err)
	}
	return nil
}

// hostCurrent makes the host copy of block id hold its bytes: a fresh block gets a host buffer
// (its bytes are undefined: any will do), a dirty block on the device is copied to the host
// (copyToHost waits for the copy).
func (t *Tier) hostCurrent(id BlockID, b *block) error {
	switch {
	case b.fresh:
		if err := t.hostAlloc(id, b); err != nil {
			return err
		}
		b.fresh, b.hostValid = false, true
		t.acct.fresh -= b.size
		t.acct.hostOnly += b.size
	case !b.clean() && b.dev != 0:
		return t.copyToHost(id, b)
	}
	return nil
}

// waitHostCopies waits for a copy still writing the valid host copy of block id (an eviction)
// and, before Go writes it (m is Write), for one still reading it (a restore).
func (t *Tier) waitHostCopies(id BlockID, b *block, m Mode) error {
	if b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) {
		if err := t.dev.EventSynchronize(uintptr(b.evictEv)); err != nil {
			return fmt.Errorf("uvm: wait for the eviction of %#x: %w", uint64(t.handle(id)), err)
		}
	}
	if m == Write && b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		if err := t.dev.EventSynchronize(uintptr(b.readyEv)); err != nil {
			return fmt.Errorf("uvm: wait for the restore of %#x: %w", uint64(t.handle(id)), err)
		}
	}
	return nil
}

// dropDeviceCopy drops the device copy of block id, which Go is about to write on the host:
// its VRAM goes back behind its uses, and the block is on the host only. When retire could not
// give the VRAM on (a wait failed), the block keeps it and its device copy, and the error comes
// back; when it gave it on, even with an error (the heap refused it), the block lets go of it
// all the same, and the error comes back: no block points to VRAM the tier no longer holds.
func (t *Tier) dropDeviceCopy(id BlockID, b *block) error {
	t.rel.waits = t.rel.waits[:0]
	t.addWaits(b)
	gone, err := t.retire(completion{dev: []devBlock{{b.dev, b.size}}})
	if !gone {
		return err
	}
	t.putReleases(b)
	t.policy.Evicted(id)
	b.dev = 0
	t.acct.device -= b.size
	t.acct.hostOnly += b.size
	if err != nil {
		return fmt.Errorf("uvm: the device copy of %#x, dropped: %w", uint64(t.handle(id)), err)
	}
	return nil
}

// copyToHost copies a dirty block's device bytes to its host buffer on the D2H stream, after
// its uses, and waits for the copy. The block stays on the device, clean. When the copy fails
// once it was asked of the Mover, which may have queued it, it waits for it all the same
// (settleCopies). t.mu is held.
func (t *Tier) copyToHost(id BlockID, b *block) error {
	if b.host == nil {
		if err := t.hostAlloc(id, b); err != nil {
			return err
		}
	}
	t.rel.waits = t.rel.waits[:0]
	t.addWaits(b)
	err := t.queueWaits(t.engine.d2h)
	tried := err == nil
	if tried {
		err = t.engine.mover.Copy(append(t.scratch.jobs[:0], CopyJob{Dst: b.hostDev, Src: b.dev, Len: int(b.size)}), t.engine.d2h)
	}
	var ev cuda.Event
	if err == nil {
		ev, err = t.pushEvent(dirD2H, completion{})
	}
	if err == nil {
		err = t.dev.EventSynchronize(uintptr(ev))
	}
	if err != nil {
		t.st.Failures++
		err = fmt.Errorf("uvm: copy of %#x to the host: %w", uint64(t.handle(id)), err)
		if tried {
			err = t.settleCopies([]BlockID{id}, err)
		}
		return err
	}
	b.hostValid = true
	t.st.Out[CauseHost].Blocks++
	t.st.Out[CauseHost].Bytes += uint64(b.size)
	return nil
}

// ReleaseHost ends a use of the []byte from AcquireHost. Errors: ErrNotAcquired.
func (t *Tier) ReleaseHost(h Handle) error {
	t.mu.Lock()
	defer t.unlock("ReleaseHost")
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

// hostAlloc gives b a host buffer. When the pool is full (poolFull: its capacity is used, the
// system or the driver had no memory to pin, a shared pool's quota) it drops host copies of
// clean blocks on the device (they become dirty), then retries; it fails with ErrHostFull. A
// pool that fails for another cause (the driver refusing a commit otherwise) is not full: its
// error comes back as it is, and no host copy is dropped for it. t.mu is held.
func (t *Tier) hostAlloc(id BlockID, b *block) error {
	buf, err := t.poolAlloc(b.size)
	if err != nil && poolFull(err) && t.dropHostCopies(b.size) {
		buf, err = t.poolAlloc(b.size)
	}
	if err != nil {
		if poolFull(err) || errors.Is(err, pinned.ErrTooLarge) {
			return fmt.Errorf("%w: host buffer of %d bytes for block %#x: %w", ErrHostFull, b.size, uint64(t.handle(id)), err)
		}
		return fmt.Errorf("uvm: host buffer of %d bytes for block %#x: %w", b.size, uint64(t.handle(id)), err)
	}
	addr := uintptr(0)
	if len(buf) > 0 {
		addr = mem.Addr(buf)
	}
	dp := cuda.DevicePtr(addr)
	if !t.mem.unified {
		if dp, err = t.mem.pool.DevicePointer(buf); err != nil {
			_ = t.mem.pool.Free(buf)
			return fmt.Errorf("uvm: device address of a host buffer: %w", err)
		}
	}
	b.host, b.hostDev, b.hostValid, b.hostLent = buf, dp, false, false
	t.acct.hostHeld += b.size
	return nil
}

// poolAlloc allocates a host buffer of n bytes: from the tier's own pool, whose alignment is
// hostAlign, or aligned to hostAlign from a pool given (Options.HostPool).
func (t *Tier) poolAlloc(n uintptr) ([]byte, error) {
	if t.mem.ownPool {
		return t.mem.pool.Alloc(int(n))
	}
	return t.mem.pool.AllocAligned(int(n), hostAlign)
}

// poolFull reports an allocation the host pool refused for want of room: its capacity used up,
// the system or the driver out of memory to pin (pinned.ErrOutOfMemory), or its quota. A
// commit the driver refused for another cause is pinned.ErrRefused: not a full pool.
func poolFull(err error) bool {
	return errors.Is(err, pinned.ErrQuota) || errors.Is(err, pinned.ErrOutOfMemory)
}

// dropHostCopies frees host copies of clean, unacquired blocks on the device, not in flight,
// worth at least want bytes if it can; it reports whether it freed any.
func (t *Tier) dropHostCopies(want uintptr) bool {
	var got uintptr
	for i := range t.blocks {
		b := &t.blocks[i]
		if !b.live || b.dev == 0 || b.host == nil || b.hostPins > 0 || b.chosen ||
			(b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) || (b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq)) {
			continue
		}
		if t.mem.pool.Free(b.host) != nil {
			continue
		}
		b.host, b.hostDev, b.hostValid, b.hostLent = nil, 0, false, false
		t.acct.hostHeld -= b.size
		t.st.HostCopiesDropped++
		if got += b.size; got >= want {
			break
		}
	}
	return got > 0
}
