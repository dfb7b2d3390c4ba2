package uvm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// Device access: Acquire makes a block resident for work queued on a stream, and Release ends
// that use, in stream order: a block brought back is copied on the tier's H2D stream and the
// user's stream waits for that copy (no CPU wait); a Release records an event on the user's
// stream (release.go) that the block's next move waits for. AcquireContext waits for room instead
// of failing with ErrAllPinned.
//
// Invariants: an acquired block (pins > 0) is on the device and out of the policy; it counts its
// acquisitions per stream (uses), and is never moved or evicted before as many Releases.

// Mode says what an acquisition does to a block.
type Mode uint8

const (
	// Read leaves the block's bytes as they are: a host copy stays valid (the block is clean).
	Read Mode = iota
	// Write may change the bytes: a host copy becomes stale (the block is dirty).
	Write
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Acquire makes block h resident and returns its device address for work queued on stream s from
// now until Release(h, s). It does not wait for a copy: a block brought back is copied on the
// tier's H2D stream and s is made to wait for it. Mode Write marks the host copy stale. The block
// stays acquired (never moved) until as many Releases on s as Acquires on s. Errors: ErrClosed,
// ErrInvalidHandle, ErrInvalidStream (a stream the driver does not know; the tier asks it once per
// stream; ErrDeviceFault instead when the context has failed; a known stream destroyed without
// ForgetStream whose wait the driver refuses is then forgotten, as a refused Release forgets it,
// its uses on other blocks ending by a synchronize of the device), ErrAllPinned (no room: the budget, or
// the device heap, is held by acquired blocks), ErrAcquired (the host holds the block for writing, or for reading and m
// is Write), an error matching cuda.ErrCapturing when s is capturing a CUDA graph and the block
// must be waited for there (it is brought back or still arriving, or was last released on another
// stream: the wait would be a node of the graph), and the errors of the copy, the device heap and
// the driver (with Write, of letting go of the host buffer AcquireHost lent: a sticky error
// refuses it), after which the block is not acquired: where it was, or, when its copy back was
// queued and a wait for it on s could not be, resident and evictable like any block not acquired. A
// block resident and ready for s is acquired with no driver call, capture or not: a graph that uses
// it must be launched for the last time before its Release, which the tier cannot know; acquire a
// graph's blocks before the capture begins.
func (t *Tier) Acquire(h Handle, s cuda.Stream, m Mode) (cuda.DevicePtr, error) {
	start := t.acquireStart() // latency.go
	t.mu.Lock()
	misses := t.st.Misses
	p, err := t.acquire(h, s, m)
	if err == nil {
		t.timeAcquire(start, t.st.Misses != misses) // latency.go
	}
	t.unlock("Acquire")
	return p, faulted(err)
}

// AcquireContext is Acquire, except that when every evictable byte is acquired
// (ErrAllPinned) it waits for room instead of failing: it tries again after each Release,
// ReleaseHost or Free of the tier, and at least every 10 ms (memory another user of a
// shared device heap frees is not seen otherwise), until it succeeds, fails otherwise, or ctx
// is done: then ctx's error is returned, joined with ErrAllPinned. Like Acquire, it does not
// wait for copies.
func (t *Tier) AcquireContext(ctx context.Context, h Handle, s cuda.Stream, m Mode) (cuda.DevicePtr, error) {
	start := t.acquireStart() // latency.go
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		t.mu.Lock()
		misses := t.st.Misses
		p, err := t.acquire(h, s, m)
		if invariants.Enabled {
			t.checkInvariants("AcquireContext")
		}
		if err == nil {
			t.timeAcquire(start, t.st.Misses != misses) // latency.go
		}
		if err == nil || !errors.Is(err, ErrAllPinned) {
			t.mu.Unlock()
			return p, faulted(err)
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
	restored := b.dev == 0
	if restored {
		// It queues a wait on s: refused, before anything moves, while s captures (waitOn
		// asks again, in the capture gate, as it queues the wait).
		if err := t.notCapturing(s, "Acquire", h); err != nil {
			return 0, err
		}
		t.st.Misses++
		t.lat.missAt = nanotime() // latency.go
		t.scratch.victims = t.scratch.victims[:0]
		ids := append(t.scratch.one[:0], id)
		t.scratch.one = ids[:0] // kept: the next miss allocates nothing
		b.chosen = true
		if err := t.restore(ids, b.size, CauseAcquire); err != nil {
			return 0, err
		}
	} else {
		t.st.Hits++
	}
	if err := t.waitOn(id, b, s, restored); err != nil {
		return 0, err
	}
	if m == Write {
		if b.hostLent { // the next copy to the host goes to another buffer (host.go)
			if err := t.unlendHost(id, b); err != nil {
				if restored {
					t.policy.Used(id) // resident, not acquired: evictable (waitReady)
				}
				return 0, err
			}
		}
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

// waitOn makes s wait for block id (waitReady) when the block's restore is in flight or it was
// released on another stream since s waited (a hit that queues nothing asks nothing), refused
// with an error matching cuda.ErrCapturing while a capture holds s: the wait would be a node of
// the user's graph (the driver refuses a wait for an event recorded outside the capture, and
// invalidates the capture). The check of s and the wait hold the capture gate
// (waitUncaptured), so that a capture begun through package cuda meanwhile waits for the wait;
// a refusal of the wait is dealt with after the gate is let go (refusedStream asks the driver
// in the gate of its own: a second hold of the gate by one goroutine deadlocks with a begin
// waiting between the two). A block this Acquire brought back (restored) stays on the device,
// unacquired, when refused. t.mu is held.
func (t *Tier) waitOn(id BlockID, b *block, s cuda.Stream, restored bool) error {
	if !(b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) && !t.mustWait(b, s) {
		return nil
	}
	h := t.handle(id)
	captured, err := t.waitUncaptured(id, b, s, restored)
	if captured != nil {
		return captured
	}
	if err != nil {
		return t.refusedStream(s, fmt.Sprintf("stream %#x waits for block %#x", s, uint64(h)), err)
	}
	return nil
}

// waitUncaptured is waitOn's check of s (its refusal: captured) and its wait (the driver's
// refusal: err), in the capture gate. t.mu is held.
func (t *Tier) waitUncaptured(id BlockID, b *block, s cuda.Stream, restored bool) (captured, err error) {
	icuda.HoldCaptureBegins()
	defer icuda.ReleaseCaptureBegins()
	if err := t.notCapturing(s, "Acquire", t.handle(id)); err != nil {
		if restored {
			t.policy.Used(id) // resident, not acquired: evictable (waitReady)
		}
		return err, nil
	}
	return nil, t.waitReady(id, b, s, restored)
}

// waitReady makes s wait for block id's restore if it is in flight, and for its releases on
// other streams (release.go). When a wait cannot be queued, a block that this Acquire brought
// back (restored) stays on the device, unacquired: it goes into the policy, evictable as the
// invariants want, not held outside every list with its VRAM for good. t.mu is held.
func (t *Tier) waitReady(id BlockID, b *block, s cuda.Stream, restored bool) error {
	var err error
	if b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		err = t.dev.StreamWaitEvent(uintptr(s), uintptr(b.readyEv))
	}
	if err == nil {
		err = t.waitReleases(b, s)
	}
	if err != nil && restored {
		t.policy.Used(id)
	}
	return err
}

// Release ends one use of block h on stream s: an event recorded on s now marks the end of
// the work that uses it, and the block is moved only after that event. Errors: ErrNotAcquired
// when the block is not acquired, ErrWrongStream when it is acquired on other streams only
// (the use goes on), an error matching cuda.ErrCapturing when s is capturing a CUDA graph (the
// event would be a node of the graph: the use goes on; release it once the capture has ended,
// after the graph's last launch). When the event cannot be recorded (s was destroyed, say),
// the use ends anyway, after the tier has waited for the work on s (or on the whole device),
// and the error says the block was released (wrapping ErrInvalidStream when the driver
// refused s, and ErrDeviceFault instead when it refused the wait for the device too: a sticky
// error). The one exception: the wait for the whole device would end a CUDA graph capture on
// another stream the tier knows, so while one captures it is not made, and the Release is
// refused with an error matching cuda.ErrCapturing: the use goes on; release it again once the
// capture has ended, and the tier then waits for the device, not for whatever stream has s's
// handle by then.
func (t *Tier) Release(h Handle, s cuda.Stream) error { return faulted(t.releaseUse(h, s)) }

// releaseUse is Release, its error not yet made to match ErrDeviceFault.
func (t *Tier) releaseUse(h Handle, s cuda.Stream) error {
	t.mu.Lock()
	defer t.unlock("Release")
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
	u := &b.uses[k]
	if err = errRefusedBefore; !u.refused {
		err = t.recordRelease(b, s)
		if errors.Is(err, pinmalloc.ErrCapturing) {
			return fmt.Errorf("uvm: Release of block %#x refused: %w; the use goes on: release it once the capture ends", uint64(h), err)
		}
	}
	if err != nil {
		ended, uerr := t.unordered(h, u, err) // streams.go
		if !ended {
			return uerr
		}
		err = uerr
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

// signal wakes AcquireContext callers waiting for room. t.mu is held.
func (t *Tier) signal() {
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
}
