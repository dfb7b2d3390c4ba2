package device

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Giving memory back: the deferred frees done (Sync), the stream heaps trimmed (Trim), a
// stream forgotten (ForgetStream), the heap closed (Close).

// Sync waits until every deferred free has completed and does it. The frees on a stream that
// is capturing a CUDA graph cannot complete before the graph is launched: they stay, and the
// error matches cuda.ErrCapturing. The frees on a default stream, waited for with a point
// recorded in the legacy stream, stay too when the driver cannot make its event (cuEventCreate
// refused): the error matches ErrOutOfMemory where the driver's memory ran out, else
// pinmalloc.ErrRefused, and says "no event"; nothing else is synchronized for them. The frees of a stream destroyed before a ForgetStream that a
// capture refused (parked: see ForgetStream), and a held block's free parked after the driver
// refused its clear (Hold.Release), are waited for with a synchronize of the context, which Sync
// does not make while a capture holds a stream of the heap's or the legacy stream: they stay
// too, with the same error, said while such a free waits for that synchronize (a parked heap
// with no free is Trim's). The held block is cleared and freed then; while the driver refuses
// the clear again, its free stays and Sync returns that refusal. Sync also returns the errors of
// the parked frees that other calls have done since the last Sync, Trim or Close (ForgetStream,
// Stats), once.
func (h *Heap) Sync() error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.unlock("Sync")
	// The parked entries are settled twice, before and after the drain. An entry that stays
	// for a reason of its own (a clear refused) is tried again at the second, which says what
	// keeps it then: the first says only its synchronize's error, which is Sync's while a
	// parked free waits for that synchronize still (a parked heap's memory is Trim's; a free
	// that waits for its clear alone says its own refusal; the drain may have synchronized the
	// context since, passing them all).
	perr := h.settleParked(true, noneMine)
	if betweenSettles != nil {
		betweenSettles()
	}
	err := h.drain()
	serr := h.settleParked(false, nil)
	if !h.parkedSyncWaits(holdsFrees) {
		perr = nil
	}
	return faulted(errkind.Once(perr, err, serr, h.takeParkErr()))
}

// Trim waits for the deferred frees, synchronizes every stream whose heap holds memory, gives
// the memory the stream heaps hold back to the arena and decommits the arena's free chunks. A
// stream capturing a CUDA graph is neither waited for nor synchronized: its frees and its
// heap's memory stay, and the error matches cuda.ErrCapturing (while a blocking stream
// captures, the legacy stream cannot be waited for: the heaps of the blocking streams and the
// default ones keep their memory too, the non-blocking streams' give theirs back); so do those
// of the streams parked by a ForgetStream that a capture refused, which wait for a synchronize
// of the context that Trim makes once no capture holds it. Like Sync, it says a held block's
// parked free whose clear the driver refuses again, and returns the errors of parked frees done
// by other calls since the last Sync, Trim or Close, once.
func (h *Heap) Trim() error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.unlock("Trim")
	err := h.reclaim()
	h.a.Trim()
	return faulted(errors.Join(err, h.takeParkErr()))
}

// ForgetStream waits for s, does its deferred frees (and those of s's blocks on streams that
// have passed them), gives back the memory its heap holds and forgets s, so that it may be
// destroyed. It fails with an error wrapping heap.ErrLiveBlocks, and keeps s, while blocks
// allocated on s are live, or freed on a stream that has not passed the free yet. While a CUDA
// graph capture holds s itself, it waits for nothing, keeps s and fails with an error matching
// cuda.ErrCapturing: call it again once the capture has ended.
//
// A stream destroyed before its ForgetStream, whose handle the driver refuses while it still
// runs the work queued there, is waited for with a synchronize of the context instead, and then
// forgotten the same way. While a capture holds the legacy stream or another stream of the
// heap's, that synchronize would end the capture: ForgetStream then waits for nothing, fails with
// an error matching cuda.ErrCapturing, and parks s. Its deferred frees and its heap (live blocks
// and memory) leave s's handle, which the driver may give to the next stream created: that stream
// starts with nothing of s's, its frees ordered as its own flags say. Parked, they still count
// in Stats, and wait for a synchronize of the context: the next ForgetStream, Sync, Trim, Close,
// or Alloc out of memory makes one once no capture holds a stream of the heap's or the legacy
// stream (Trim fails as above meanwhile, Sync too while s's frees wait, Close with ErrBusy), and
// then gives them back, the heap's memory once its blocks are all freed; Stats gives them back
// after any synchronize of the context the heap has made (a poll's, for a stream destroyed without
// ForgetStream). That synchronize waits for the work of every stream of the context, the caller's
// others too: only a synchronize of the context waits for a destroyed stream's work. It is made
// only while something parked waits for one, and once for all that was parked before it (a heap
// kept after it for its live blocks waits for none); with nothing parked, none of these calls makes
// it. A ForgetStream of another stream makes it too, to give the parked streams back early.
// ForgetStream(s) again forgets what s names then: a stream created since, given s's handle
// (after which the parked s goes back as above, at this call if the context can be synchronized,
// or later); or, with nothing under s, the parked s itself, which it gives back, or fails with an
// error matching cuda.ErrCapturing while a capture still holds the context, and with one wrapping
// heap.ErrLiveBlocks while blocks allocated on s are live (its heap goes once they are freed).
//
// When the device has faulted (the context's sticky error), the synchronize fails: ForgetStream
// keeps s and fails with an error wrapping ErrDeviceFault.
//
// A default stream is waited for with a point recorded in the legacy stream. When the driver
// cannot make its event (cuEventCreate refused), s was not asked: ForgetStream waits for nothing
// (no synchronize of the context, which would end a capture on a stream the heap never saw),
// keeps s with its deferred frees and its memory, and fails with ErrOutOfMemory where the
// driver's memory ran out, else pinmalloc.ErrRefused, saying "no event"; call it again.
//
// Its error is s's outcome alone. Streams parked under other handles, and held blocks' frees
// parked after their memset was refused (Hold.Release), go back at this call when its
// synchronize passes them, but what keeps one parked, or fails as it goes back, is said by the
// next Sync, Trim or Close, not here.
func (h *Heap) ForgetStream(s cuda.Stream) error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.unlock("ForgetStream")
	return faulted(h.forget(s))
}

// forget is ForgetStream's work. h.mu is held.
func (h *Heap) forget(s cuda.Stream) error {
	// Streams parked before (destroyed ones, this one's handle or another's): released now if
	// the context can be synchronized. Only the errors of a stream parked with s's handle are
	// s's (below), and the synchronize's when one of those waited for it; the others' are their
	// own (settleParked): a capture's refusal of the synchronize that only they wait for is not
	// s's outcome (a parked heap kept for its live blocks waits for none).
	waited := h.parkedWaits(s)
	serr, perr := h.settleParkedApart(true, parkedUnder(s))
	if waited {
		perr = errors.Join(serr, perr)
	}
	// Forgotten only once waited for (or parked): a held block's FreeAsync on s, made at its last
	// Release, is a plain free once s is forgotten (hold.go), so s must have passed it by then.
	l := h.lists.Lookup(uintptr(s))
	if l == nil && h.streams[s] == nil && !h.heldFreedOn(s) {
		h.lists.Forget(uintptr(s))
		switch {
		case perr != nil && h.parkedAs(s):
			return errkind.Wrapf("device: ", perr, "device: forget stream %#x, destroyed and parked", s)
		case h.parkedAs(s): // synchronized past, its heap kept for its live blocks
			return fmt.Errorf("device: forget stream %#x, destroyed and parked: %w: %d blocks allocated on it; its heap goes once they are freed",
				s, heap.ErrLiveBlocks, h.parkedLive(s))
		}
		return nil // nothing of s's: no heap, no deferred free
	}
	// s's own synchronize, and the legacy stream's implicit order (streamq's Points.WaitStream):
	// its deferred frees and its heap's memory change owner next.
	if err := h.lists.Points().WaitStream(uintptr(s)); err != nil {
		if park, err := h.waitRefused(s, err); err != nil {
			if park {
				h.park(s, h.lists.Forget(uintptr(s)))
			}
			return err
		}
	}
	if l = h.lists.Forget(uintptr(s)); l != nil {
		h.done = h.lists.Release(l, h.done)
	}
	if err := h.finishDone(); err != nil {
		return fmt.Errorf("device: deferred frees on stream %#x: %w", s, err)
	}
	// s's blocks freed on other streams that have passed their frees come back too.
	if err := h.poll(); err != nil {
		return err
	}
	h.purgeForget(s)
	if sh := h.streams[s]; sh != nil {
		if err := sh.Close(); err != nil {
			return fmt.Errorf("device: stream %#x: %w", s, err)
		}
		delete(h.streams, s)
		delete(h.purge.looks, sh)
		delete(h.passed, sh)
	}
	// Those the synchronize of the context for s passed; a stream parked with s's handle goes
	// back now or later (ForgetStream), which is not this call's outcome.
	return h.settleParked(false, noneMine)
}

// waitRefused answers ForgetStream's wait for s, which failed with cause: unless a capture
// refused it, or the driver made no event for a default stream's point (streamq.ErrNoEvent: s
// was not asked), it synchronizes the context, which waits for the work of every stream, s's
// included when the driver refuses s for having been destroyed (it still runs the work queued
// there). That synchronize would end a capture on any stream of the context, and the driver
// refuses it then: so it asks the heap's streams first, those with a list or a heap
// (heapStreams), and the legacy stream, which answers for a capture on a blocking stream too
// (streamq's Lists.Captured), and waits for nothing while one captures.
// It returns nil once the context has been synchronized; when that synchronize fails with the
// context's sticky error, an error wrapping ErrDeviceFault. park says that the caller must park
// s (park.go): s's own wait failed for a reason other than a capture (the driver refuses its
// handle: destroyed, and the handle free for a new stream) and a capture elsewhere kept the
// context from being synchronized. h.mu is held.
func (h *Heap) waitRefused(s cuda.Stream, cause error) (park bool, err error) {
	const kept = "it keeps its deferred frees and its memory; call ForgetStream again once the capture has ended"
	const parked = "its deferred frees and its heap's memory are parked apart from its handle, which a new stream may take, " +
		"until the heap synchronizes the context (ForgetStream, Sync, Trim or Close once the capture has ended)"
	if errors.Is(cause, cuda.ErrCapturing) {
		return false, fmt.Errorf("device: forget stream %#x: %w; %s", s, cause, kept)
	}
	if errors.Is(cause, streamq.ErrNoEvent) {
		// A default stream's point got no event: s was not asked, and is not refused. The
		// synchronize of the context would wait for every stream's work, and end a capture on
		// a stream the heap never saw (the driver lists no captures).
		return false, fmt.Errorf("device: forget stream %#x: %w; it keeps its deferred frees and its memory: call ForgetStream again", s, cause)
	}
	c, held, err := h.lists.WaitAllUncaptured()
	if held {
		return true, fmt.Errorf("device: forget stream %#x: its synchronize failed (%v), and the synchronize of the context that would wait for its work instead would end the CUDA graph capture on stream %#x: %w; %s",
			s, cause, c, cuda.ErrCapturing, parked)
	}
	if err != nil {
		if errors.Is(err, cuda.ErrCapturing) {
			return true, fmt.Errorf("device: forget stream %#x: its synchronize failed (%v), and the synchronize of the context that would wait for its work instead was refused: %w; %s", s, cause, err, parked)
		}
		if errors.Is(err, cuda.ErrDeviceFault) { // the context runs no more work, whatever s is
			return false, fmt.Errorf("%w: forget stream %#x: its synchronize failed%s, and so did the synchronize of the context that would wait for its work instead: %w; it keeps its deferred frees and its memory",
				ErrDeviceFault, s, besides(cause, err), err)
		}
		return false, fmt.Errorf("device: forget stream %#x: its synchronize failed%s, and so did the synchronize of the context that would wait for its work instead: %w; it keeps its deferred frees and its memory",
			s, besides(cause, err), err)
	}
	return false, nil
}

// heapStreams yields the streams with a heap (h.streams) and the handles of the parked streams
// (park.go: the driver may have given one to a stream the heap has not seen), for the capture
// checks of the lists (streamq's Lists.SetOthers): a stream heap's stream may have no list, its
// list gone after listLinger polls that found it empty, and a synchronize of the context for a
// stream the driver refuses (Recover, waitRefused, settleParked) would end a capture there. h.mu
// is held.
func (h *Heap) heapStreams(yield func(streamq.Stream) bool) {
	for s := range h.streams {
		if !yield(streamq.Stream(s)) {
			return
		}
	}
	for _, ps := range h.parked {
		if !ps.refused && !yield(streamq.Stream(ps.s)) {
			return
		}
	}
}

// besides says cause, the error of the call that led to the driver's error err, unless it is
// the same driver error: said once.
func besides(cause, err error) string {
	if c, ok := cuda.ResultCode(cause); ok {
		if e, _ := cuda.ResultCode(err); e == c {
			return ""
		}
	}
	return fmt.Sprintf(" (%v)", cause)
}

// Close releases the heap's memory and events, and the device if Open made it. It fails, and
// releases nothing, with an error wrapping heap.ErrLiveBlocks while blocks are live, and with one
// wrapping ErrBusy while a stream the heap has seen has work in flight, or the legacy default
// stream does while a seen stream is blocking or the legacy stream itself (its earlier work is
// ordered before that stream's frees): Sync, or synchronize the stream, and Close again; while a
// CUDA graph capture holds a stream the heap has seen, or a blocking stream (which holds the
// legacy stream), no wait may touch it, and the error matches cuda.ErrCapturing too: Close again
// once the capture has ended. A capture on a non-blocking stream the heap has never seen is
// invisible to it (the driver lists no captures): a synchronize of the context that Close needs
// would end it, so end such captures before Close. Points the
// heap's own polls recorded (Alloc and Stats for the deferred frees, the idle purge for quiet
// stream heaps) are not such work: Close waits for those that wait for none of the user's work in
// flight, and asks again. With every such stream idle, the deferred frees are done at once; a free
// on the legacy stream (or the heap of the legacy stream) is done after a point Close records there
// and waits for: it waits only for work of blocking streams the heap has never seen, which the
// legacy stream's order puts before those frees, as it puts it before cudaFreeAsync's. A stream
// destroyed without ForgetStream, whose handle the driver refuses while it still runs the work
// queued there, is answered with a synchronize of the context, which waits for that work, before
// anything is given back, and so is a stream parked by a ForgetStream that a capture refused (the
// synchronize made once no stream the heap sees has work in flight; refused with ErrBusy while a
// capture holds the context); when that synchronize fails, Close returns its error and releases
// nothing. A held block's free parked after the driver refused its clear (Options.ZeroOnFree,
// Hold.Release) is cleared and made then too; when the driver refuses that clear again, the free
// waits still: Close fails with an error wrapping ErrBusy and the driver's, releases nothing, and
// a later Close tries again. A held block (Hold) is live until its last Release, whether a Free
// or FreeAsync of it waits for that Release or not: while one is held, Close fails with
// heap.ErrLiveBlocks (the error counts the held blocks) and releases nothing; release the holds
// (a remote.Worker's Close lets go of those its abandoned transfers keep), free the blocks, and
// Close again.
//
// When the driver refuses to give memory back (an unmap, say) or to destroy one of the heap's
// events, Close returns its error and the heap is closed, what was refused kept (and the device,
// if Open made it): a later Close gives them back.
// Like Sync, a Close that closes the heap also returns the errors of parked frees done by other
// calls since the last Sync, Trim or Close, once.
func (h *Heap) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return faulted(h.closeHeap())
}

// closeHeap is Close's work. h.mu is held.
func (h *Heap) closeHeap() error {
	if h.closed {
		if h.refused {
			return h.releaseRefused()
		}
		return ErrClosed
	}
	live, bytes, _ := h.live()
	if deferred := len(h.deferred); live > uint64(deferred) {
		return fmt.Errorf("%w: %d blocks (%d bytes) on %d streams%s", heap.ErrLiveBlocks, live-uint64(deferred), bytes, len(h.streams)+h.parkedHeaps(), h.heldSay())
	}
	// Every stream that may have used the heap's memory: each with a heap (same-stream frees)
	// or a list (seen, with frees or not; Settle adds those), and the legacy stream when one
	// is blocking or a default stream.
	ss := make([]streamq.Stream, 0, len(h.streams))
	for s := range h.streams {
		ss = append(ss, streamq.Stream(s))
	}
	var s streamq.Stream
	var running bool
	var err error
	h.done, s, running, err = h.lists.Settle(h.done, ss, h.purge.trims)
	if ferr := h.finishDone(); ferr != nil {
		err = errors.Join(err, ferr)
	}
	var cerr error
	if running {
		cerr = streamq.CaptureRefusal(h.dev, s) // a user's capture: Settle waits for none
	}
	switch {
	case cerr != nil:
		return fmt.Errorf("%w: %w; Close again once the capture has ended", ErrBusy, cerr)
	case running && streamq.DefaultStream(s) && !slices.Contains(ss, s) && h.lists.Lookup(s) == nil:
		return fmt.Errorf("%w on the legacy default stream, which a blocking stream of the heap's is ordered with; Sync, or synchronize it, and Close again", ErrBusy)
	case running:
		return fmt.Errorf("%w on stream %#x; Sync, or synchronize it, and Close again", ErrBusy, s)
	case errors.Is(err, cuda.ErrCapturing): // a refused stream's frees wait for the capture's end
		return fmt.Errorf("%w: %w; Close again once the capture has ended", ErrBusy, err)
	case err != nil:
		return err
	}
	// The streams destroyed before their ForgetStream during a capture (park.go): every stream
	// the heap sees is idle now, so the synchronize of the context waits only for work it does
	// not see, theirs among it.
	// An entry kept for a reason of its own (a held block's parked free whose clear the driver
	// refused) is a free that waits, as Sync and Trim say: ErrBusy, unless the context faulted.
	serr, kerr := h.settleParkedApart(true, nil)
	if err := errors.Join(serr, kerr); errors.Is(err, cuda.ErrCapturing) ||
		kerr != nil && !errors.Is(kerr, cuda.ErrDeviceFault) {
		return errkind.Wrapf("device: ", err, "%w", ErrBusy)
	} else if err != nil {
		return err
	}
	if len(h.deferred) > 0 {
		return fmt.Errorf("%w: %d frees wait for their stream", ErrBusy, len(h.deferred))
	}
	errs := []error{h.purge.stop()}
	for _, sh := range h.streams {
		errs = append(errs, sh.Close())
	}
	for _, ps := range h.parked { // passed by the synchronize above: their blocks all freed
		if ps.sh != nil {
			errs = append(errs, ps.sh.Close())
		}
	}
	h.parked = nil
	errs = append(errs, h.takeParkErr())
	aerr, eerr := h.a.Close(), h.events.Close()
	errs = append(errs, aerr, eerr)
	if n := h.events.Created() - h.events.Destroyed(); n != 0 && eerr == nil {
		errs = append(errs, fmt.Errorf("device: %d events not destroyed", n))
	}
	// The arena and the event pool keep what the driver refused, for releaseRefused.
	h.refused = aerr != nil || eerr != nil
	if h.ownDev && !h.refused {
		errs = append(errs, h.dev.Close())
	}
	h.closed = true
	return errors.Join(errs...)
}

// releaseRefused gives back, after Close, the memory and the events the driver refused to give
// back then, and the device after them if Open made it. h.mu is held.
func (h *Heap) releaseRefused() error {
	aerr := h.a.Close()
	if errors.Is(aerr, arena.ErrClosed) {
		aerr = nil
	}
	if err := errors.Join(aerr, h.events.Close()); err != nil {
		return err
	}
	h.refused = false
	if h.ownDev {
		return h.dev.Close()
	}
	return nil
}
