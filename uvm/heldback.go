package uvm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Memory held back: the VRAM and host buffer of a freed block whose reuse the tier could order
// neither on its D2H stream nor by a wait on the CPU (retire), which happens when the context
// has a sticky error: a kernel or copy faulted (CUDA_ERROR_ILLEGAL_ADDRESS and its kind), every
// later call of the driver that waits or queues work returns that error, and NVIDIA's word is
// that the process must end to use CUDA again. Work queued before the fault may, as far as the
// tier can tell, still read or write that memory, so handing it to another block or back to the
// heap or the pool (and their other users) could corrupt their bytes without a word. The tier
// keeps it out of use instead: the block is freed, its memory is listed here, counted in Stats
// (HeldBackDeviceBytes, HeldBackHostBytes), and Free says so (ErrHeldBack). The VRAM of a
// restore that failed once its copies were tried is held back the same way when neither the
// batch's event nor a synchronize of the H2D stream can be had (undoRestore): the block stays
// on the host, and the Acquire or Prefetch returns the driver's error. So are the host buffers
// that the copies of a failed eviction, or of a failed copy for AcquireHost, may still write,
// when the wait for them fails (settleCopies): the blocks stay on the device and let go of
// them (they held no valid copy).
//
// Every call that waits for the tier's transfers anyway (Sync, Close, an allocation the device
// heap refuses) tries again, with a synchronize of the device (cuCtxSynchronize: every stream of
// the context, the user's too, has passed everything queued before it): once one succeeds, the
// memory goes where a completion sends it (completion.go). Under a sticky error none succeeds,
// so the memory stays held back; Close then keeps it, with the streams, events, device heap and
// host pool that hold it, returns ErrHeldBack saying how much, and a later Close tries again.
// Nothing is released under work that may still run. The driver documents no more than this:
// a sticky error lasts until the context is destroyed (cuDevicePrimaryCtxReset, or the release
// of its last retain), which destroys its streams, its work and its allocations (not VMM ones:
// cuMemCreate memory outlives it); the tier's device retains the context, so the tier never
// sees that happen while it is open.
//
// The host buffers that those copies of a failed restore may still read stay the blocks' (they
// hold the blocks' only copies), marked hostRead: Free holds such a buffer back rather than give
// it to the pool, until a later restore of the block queues a batch after those copies on the
// H2D stream, or a synchronize of the device succeeds.
//
// Invariant (t.mu held): held.dev and held.host are the bytes of VRAM and of host buffers of
// the completions on held.list, and no block points to that memory; held.reads is the number of
// blocks marked hostRead, each on the host only, with a host buffer.

// heldBack is the memory the tier keeps out of use after a failed wait.
type heldBack struct {
	list      []completion
	dev, host uintptr
	reads     int // blocks marked hostRead (undoRestore)
}

// unreadHost clears b's hostRead: a batch after the copies that may read its host buffer, or a
// synchronize of the device, orders their reuse. t.mu is held.
func (t *Tier) unreadHost(b *block) {
	if b.hostRead {
		b.hostRead = false
		t.held.reads--
	}
}

// holdBack keeps c's memory out of use until a synchronize of the device succeeds
// (retryHeld). t.mu is held.
func (t *Tier) holdBack(c completion) {
	for _, d := range c.dev {
		t.held.dev += d.size
	}
	for _, b := range c.host {
		t.held.host += uintptr(len(b))
	}
	t.held.list = append(t.held.list, c)
}

// retryHeld gives the memory held back to where its completions send it, after a synchronize of
// the device; when the synchronize fails, it stays, and the error says how much. While a CUDA
// graph capture holds a stream the tier knows, which that synchronize would end, it synchronizes
// nothing: the memory stays, and the error says why (ErrCapturing). t.mu is held.
func (t *Tier) retryHeld() error {
	if len(t.held.list) == 0 {
		return nil
	}
	// The look for a capture and the synchronize it allows hold the capture gate: a capture
	// begun through package cuda meanwhile waits for the synchronize (WaitAllUncaptured).
	s, held, err := t.batches.lists.WaitAllUncaptured()
	if held {
		// Why, an error of its own: Close's error keeps it whole (distinct).
		why := fmt.Errorf("the synchronize of the device that gives it back would end "+
			"the CUDA graph capture on stream %#x: %w", s, pinmalloc.ErrCapturing)
		return fmt.Errorf("%w: %s: %w", ErrHeldBack, t.heldBytes(), why)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: synchronize: %w", ErrHeldBack, t.heldBytes(), err)
	}
	list := t.held.list
	if t.held.reads > 0 { // the copies that may read their host buffers have run
		for i := range t.blocks {
			t.unreadHost(&t.blocks[i])
		}
	}
	t.held = heldBack{}
	for _, c := range list {
		if cerr := t.complete(c); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// heldBytes says how much memory is held back, for errors.
func (t *Tier) heldBytes() string {
	return fmt.Sprintf("%s of VRAM and %s of host buffers stay out of use",
		units.Bytes(uint64(t.held.dev)), units.Bytes(uint64(t.held.host)))
}

// holding reports whether memory is held back, batches are still in flight (after a failed
// drain), or spare VRAM is left that the device heap refused back (flushSpares), so that Close
// must keep the memory and what it needs to give it back. t.mu is held.
func (t *Tier) holding() bool {
	return len(t.held.list) > 0 || t.batches.lists.Weight() > 0 || t.spare.bytes > 0
}

// heldBackError is Close's error when it keeps memory held back: it says so once, with what
// errs say besides, each text once (under a sticky error every wait Close made says the same).
func (t *Tier) heldBackError(errs []error) error {
	var kept []string
	if len(t.held.list) > 0 {
		kept = append(kept, t.heldBytes())
	}
	if n := t.batches.lists.Weight(); n > 0 {
		kept = append(kept, units.Count(uint64(n), "batch", "batches")+" of transfers in flight")
	}
	if t.spare.bytes > 0 {
		kept = append(kept, units.Bytes(uint64(t.spare.bytes))+
			" of spare VRAM the device heap refused back")
	}
	return fmt.Errorf("%w: %s; Close keeps them, and the tier's streams, events, device heap and host pool, and a later Close tries again: %w",
		ErrHeldBack, strings.Join(kept, ", "), distinct(errs))
}

// distinct joins errs, saying each failure once (errkind.Once): the errors an errors.Join joins
// are laid out, nil ones and ErrHeldBack itself left out (the caller says it), and an error that
// wraps ErrHeldBack gives what it wraps besides (retryHeld's: the driver's error, or why it
// could not try, whole); any other error with a text of its own (one that wraps two,
// keptError's) is kept whole.
func distinct(errs []error) error {
	var out []error
	var add func(err error)
	add = func(err error) {
		if err == nil || err == ErrHeldBack {
			return
		}
		parts, ok := errkind.JoinParts(err)
		if !ok {
			j, several := err.(interface{ Unwrap() []error })
			if !several || !slices.Contains(j.Unwrap(), ErrHeldBack) {
				out = append(out, err)
				return
			}
			parts = j.Unwrap()
		}
		for _, e := range parts {
			add(e)
		}
	}
	for _, err := range errs {
		add(err)
	}
	return errkind.Once(out...)
}
