package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// The user's streams.
//
// Acquire and Prefetch take the stream the user's work runs on, as a raw handle the tier did
// not make. A handle the driver does not know (a bogus value, a destroyed stream) must be
// refused before the tier queues anything for it: a block acquired on it could never be
// released in stream order. So every Acquire and Prefetch checks its stream, hit or miss, as
// pinned.Pool and device.Heap check theirs: with internal/streamq's seen streams (Lists.Check,
// t.streams, whose lists hold nothing), which refuse the per-thread default stream (a Release's
// event and a restore's wait would be recorded from whatever OS thread makes the call) and ask
// the driver once per stream by recording an event of the tier's device in it (another
// device's stream is refused too), so that an Acquire on a known stream makes no driver call.
// The streams known are bounded (maxKnownStreams): past that they are pruned, and the streams
// still in use are checked again once each.
//
// A stream the tier knows may still be destroyed under it. ForgetStream is the clean way:
// called before the stream is destroyed (as device.Heap.ForgetStream), it refuses while blocks
// are acquired on the stream and then forgets it, so that an Acquire on the dead handle is
// checked, and refused, again. The release events the tier recorded there stay events to wait
// on after the stream is gone (the driver runs the destroyed stream's queued work to its end),
// but they stop standing for the handle: the driver gives a destroyed stream's handle to a
// stream created later, which is not ordered after the old stream's work, so ForgetStream makes
// them the old stream's alone (release.go's forgetReleases): a block acquired on the new stream
// waits for them, as for another stream's.
//
// Without ForgetStream the handle stays known: an Acquire on it is accepted without a check
// (the driver may still refuse the work it queues there), and the Release fails to record its
// event. That Release still ends the use: with no event to order the block's moves after the
// work queued on the stream, the tier waits for that work itself, on the stream if the driver
// still takes it, else on the whole device (cuCtxSynchronize: only it waits for a destroyed
// stream's work), forgets the stream, and returns an error that says the block was released
// (wrapping ErrInvalidStream when the driver refused the stream). Free does the same for each
// stream its block is acquired on. So a destroyed stream costs a device wait, never a block
// acquired for good. If even the device wait fails (a sticky error: the context runs no more
// work), the use ends anyway, and the error says that the device failed (ErrDeviceFault), not
// that the stream is invalid: whatever became of the stream, the context's error is the cause.
// The device wait is never made while a CUDA graph capture holds a stream the tier knows (see
// below): the Release or Free is then refused with ErrCapturing and the use goes on, marked
// (use.refused), as every other use on the stream, so that the same call made once the capture has ended waits for the device
// rather than record an event on whatever stream the driver gave the handle to since; and the
// release events recorded on the stream stop standing for its handle, as ForgetStream makes
// them, so that a stream given the handle meanwhile waits for them. An Acquire or Prefetch
// whose wait on the stream the driver refuses as an invalid handle (refusedStream) does the
// same, and fails with ErrInvalidStream: the stream is forgotten, its release events stand for
// it alone, and the uses still acquired on it end by a synchronize of the device. Until the
// tier has met such a refusal, it cannot tell a destroyed stream's handle from the stream the
// driver gave it to next: call ForgetStream first.

//
// After a fault, the tier answers a stream of its own that the driver refuses, and memory held
// back, with a synchronize of the device (streamq's Lists.Recover, retryHeld), as it answers a
// user's stream refused by a Release or Free (unordered). That synchronize
// would end a CUDA graph capture on any stream of the context (the driver refuses it and
// invalidates the capture), so the tier asks first, as the device heap does, about every
// stream of the user's it knows: those seen (t.streams; a Prune drops their lists, not the
// streams seen, which streamq bounds on its own), and those a block is acquired on or has a
// release event on (userStreams). While
// one captures it synchronizes nothing: the batches stay in flight, the memory held back, for a
// later call.

// userStreams are the user's streams the tier has seen: lists that never hold an item.
type userStreams = streamq.Lists[struct{}]

// userStreams yields the user's streams the tier knows (see the file comment), each once, for
// the capture check of the batches' lists (Lists.SetOthers, Lists.Captured). It is a slow path
// (after a fault), and allocates. t.mu is held.
func (t *Tier) userStreams(yield func(streamq.Stream) bool) {
	seen := map[cuda.Stream]bool{}
	var ss []cuda.Stream
	add := func(s cuda.Stream) {
		if !seen[s] {
			seen[s] = true
			ss = append(ss, s)
		}
	}
	t.streams.Range(func(s streamq.Stream, _, _ []struct{}) { add(cuda.Stream(s)) })
	for s := range t.streams.Seen { // those a Prune took out of the lists too
		add(cuda.Stream(s))
	}
	for i := range t.blocks {
		b := &t.blocks[i]
		for _, u := range b.uses {
			add(u.s)
		}
		for _, r := range b.rel {
			if r.gone == 0 { // a forgotten stream's handle may name a stream the tier never saw
				add(r.s)
			}
		}
	}
	for _, s := range ss {
		if !yield(streamq.Stream(s)) {
			return
		}
	}
}

// maxKnownStreams bounds the streams the tier remembers.
const maxKnownStreams = 1024

// checkStream accepts a stream the tier knows, or one streamq accepts and remembers (see the
// file comment). A stream refused while the context has failed is refused with ErrDeviceFault,
// not ErrInvalidStream: the driver then refuses every stream. An event the driver could not
// make to ask s with is the driver's refusal (pinmalloc.ErrRefused, and ErrOutOfMemory when
// memory ran out), not s's. t.mu is held.
func (t *Tier) checkStream(s cuda.Stream) error {
	if t.streams.Streams() >= maxKnownStreams {
		t.streams.Prune()
	}
	if _, err := t.streams.Check(uintptr(s)); err != nil {
		if ferr := t.contextFault(); ferr != nil {
			return fmt.Errorf("%w: stream %#x could not be checked: %w%s", ErrDeviceFault, s, ferr, besides(err, ferr))
		}
		if errors.Is(err, streamq.ErrNoEvent) { // not asked: the driver's want or refusal
			return fmt.Errorf("uvm: %w", err)
		}
		return fmt.Errorf("%w: %w", ErrInvalidStream, err)
	}
	return nil
}

// notCapturing refuses op on s while a CUDA graph capture holds s (streamq.CaptureRefusal):
// what the tier would queue there (a wait for its copy or for another stream's release) would
// be a node of the user's graph, run again at every launch, a release event would belong to
// the capture and stand for no point of s, and a block
// the graph uses is memory the tier moves once it is released. The refusal comes before
// anything is queued or changed. It costs one driver call (cuStreamIsCapturing). t.mu is held.
// h names the block, if one (not 0).
func (t *Tier) notCapturing(s cuda.Stream, op string, h Handle) error {
	err := streamq.CaptureRefusal(t.dev, uintptr(s))
	switch {
	case err == nil:
		return nil
	case h == 0:
		return fmt.Errorf("uvm: %s refused: %w", op, err)
	}
	return fmt.Errorf("uvm: %s of block %#x refused: %w", op, uint64(h), err)
}

// contextFault returns the context's error when the driver refuses a query of the tier's own
// H2D stream (a sticky error: every call that queues or waits fails with it), nil when the
// query answers (done or not): what tells a failed context from a stream the driver refuses.
// It waits for nothing. t.mu is held.
func (t *Tier) contextFault() error {
	if err := t.dev.StreamQuery(uintptr(t.engine.h2d)); err != nil && !errors.Is(err, pinmalloc.ErrNotReady) {
		return err
	}
	return nil
}

// besides says cause, the error of a call that led to the driver's error err, unless it says
// the same (errkind.Same): said once.
func besides(cause, err error) string {
	if errkind.Same(cause, err) {
		return ""
	}
	return fmt.Sprintf(" (%v)", cause)
}

// forget drops s from the streams the tier knows. t.mu is held.
func (t *Tier) forget(s cuda.Stream) {
	if l := t.streams.Forget(uintptr(s)); l != nil {
		_ = t.streams.Release(l, nil) // it holds nothing
	}
}

// ForgetStream makes the tier forget stream s, so that s may be destroyed: an Acquire on its
// handle afterwards is checked with the driver again, and orders the block after the uses that
// ended on s, as after another stream's (a stream created later may get s's handle). It waits
// for nothing. Call it before destroying a stream the tier has seen (see the file comment for
// what happens otherwise). It fails with ErrAcquired, and forgets nothing, while a block is
// acquired on s.
func (t *Tier) ForgetStream(s cuda.Stream) error {
	t.mu.Lock()
	defer t.unlock("ForgetStream")
	if t.closed {
		return ErrClosed
	}
	for i := range t.blocks {
		if b := &t.blocks[i]; b.live {
			for _, u := range b.uses {
				if u.s == s {
					return fmt.Errorf("%w: block %#x is acquired on stream %#x", ErrAcquired, uint64(t.handle(BlockID(i))), s)
				}
			}
		}
	}
	t.forgetReleases(s)
	t.forget(s)
	return nil
}

// unordered ends a use u of block h whose release event could not be recorded (cause): it waits
// for the work queued on u's stream, or for the device when the driver refuses the stream (and
// forgets it), and returns the error that says so, with ended true. While a capture holds u's
// stream (the event was never asked for it when the driver could not make one) it waits for
// nothing: the synchronize would end the capture; it returns, with ended false, an error
// matching pinmalloc.ErrCapturing, and the use goes on. When the device refuses the
// wait too, the context has failed (a sticky error, which the refusals of the stream and of the
// event may be too): the error says that (ErrDeviceFault, the device's error in the chain), not
// that the stream is invalid, and the event's refusal as what led there when it is another error.
//
// The synchronize of the device would end a CUDA graph capture on any stream of the context (the
// driver refuses it and invalidates the capture): while a capture holds a stream the tier knows
// (streamq's Lists.Captured, among the tier's own streams, the user's it knows and the legacy
// stream), it waits for nothing and returns, with ended false, an error matching
// pinmalloc.ErrCapturing; the use goes on, marked refused with every other use on s
// (refuseUses), so that the call made again once the
// capture has ended waits for the device without trusting the handle (the driver may have given
// it to a stream created since, which is not ordered after the old one's work), and the release
// events recorded on the stream stop standing for the handle (forgetReleases, as ForgetStream
// does), so that such a stream waits for them. t.mu is held; the caller ends the use when ended.
func (t *Tier) unordered(h Handle, u *use, cause error) (ended bool, err error) {
	s := u.s
	noEvent := "no event: " // its record failed; one the driver could not make says so itself
	if errors.Is(cause, streamq.ErrNoEvent) {
		noEvent = ""
	}
	if !u.refused {
		// In the capture gate, with no event (the one for the release could not be made): a
		// synchronize of a stream a capture holds would end the user's capture.
		captured, err := t.streams.Points().SyncUncaptured(uintptr(s))
		if captured {
			return false, fmt.Errorf("uvm: release of %#x on stream %#x refused: %s%w, and the wait for the stream's work instead would end the CUDA graph capture there (%w); the use goes on: end it again once the capture ends", uint64(h), s, noEvent, cause, pinmalloc.ErrCapturing)
		}
		if err == nil {
			return true, fmt.Errorf("uvm: release of %#x on stream %#x: %s%w; released after waiting for the stream", uint64(h), s, noEvent, cause)
		}
	}
	t.forget(s)
	// The look for a capture and the synchronize it allows hold the capture gate: a capture
	// begun through package cuda meanwhile waits for the synchronize (streamq's
	// WaitAllUncaptured).
	c, held, derr := t.batches.lists.WaitAllUncaptured()
	if held {
		// The driver refused s: its handle may go to a stream created next, before the
		// synchronize that would have passed s's release events. They stand for s alone, and
		// so do its uses, this one and those of other blocks (refuseUses).
		t.forgetReleases(s)
		t.refuseUses(s)
		return false, fmt.Errorf("uvm: release of %#x on stream %#x refused: its event could not be recorded (%w), and the synchronize of the device that would wait for the work queued there instead would end the CUDA graph capture on stream %#x: %w; the use goes on: end it again once the capture ends",
			uint64(h), s, cause, c, pinmalloc.ErrCapturing)
	}
	if derr != nil {
		return true, fmt.Errorf("%w: release of %#x on stream %#x: the device refused to wait for the work queued there: %w; the use ended all the same%s",
			ErrDeviceFault, uint64(h), s, derr, besides(fmt.Errorf("its event could not be recorded: %w", cause), derr))
	}
	return true, fmt.Errorf("%w: uvm: release of %#x on stream %#x: %s%w; released after waiting for the device", ErrInvalidStream, uint64(h), s, noEvent, cause)
}

// refusedStream is the error of what (said after "uvm: "), refused by the driver with err, a
// refusal of a wait the tier queued on the user's stream s (an Acquire's or a Prefetch's): when the driver refused the handle itself
// (pinmalloc.ErrInvalidHandle: s was destroyed without ForgetStream), it may give that handle
// to a stream created next, which is not ordered after s's work still queued, so the tier lets
// go of what stands for the handle, as a refused Release does (unordered): s is forgotten (an
// Acquire on the handle is checked again), its release events stand for s alone
// (forgetReleases: a stream given the handle waits for them), and its uses still acquired end
// by a synchronize of the device (refuseUses). The error then wraps ErrInvalidStream. t.mu is
// held.
func (t *Tier) refusedStream(s cuda.Stream, what string, err error) error {
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) || streamq.DefaultStream(uintptr(s)) {
		return fmt.Errorf("uvm: %s: %w", what, err)
	}
	t.forget(s)
	t.forgetReleases(s)
	t.refuseUses(s)
	return fmt.Errorf("%w: %s: %w", ErrInvalidStream, what, err)
}

// refuseUses marks every use of a block on stream s refused (use.refused), s's handle refused
// by the driver: their Release or Free waits for the device (unordered), not for whatever
// stream has the handle by then. t.mu is held.
func (t *Tier) refuseUses(s cuda.Stream) {
	for i := range t.blocks {
		b := &t.blocks[i]
		for k := range b.uses {
			if b.uses[k].s == s {
				b.uses[k].refused = true
			}
		}
	}
}

// errRefusedBefore is the cause unordered is given for a use whose stream the driver refused
// before (use.refused): its event is not recorded again.
var errRefusedBefore = errors.New("the driver refused the stream before")
