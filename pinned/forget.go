package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// ForgetStream waits until CUDA stream s has passed the work queued on it, takes back the
// buffers whose frees waited for it, and forgets s, as device.Heap.ForgetStream does: call it
// before destroying a stream the pool has seen (FreeAsync, RecordStream, device.Heap's async
// copies of the pool's buffers), once no other goroutine uses s. The driver may give a
// destroyed stream's handle to a new stream, of another device even, which the pool would
// otherwise take for the one it knew. Buffers still live that s was recorded on forget it too:
// s has passed what it did with them, and their free no longer waits for it. It costs a query
// of s (a synchronize when s is busy; of the pool's context when the driver no longer knows
// s), and a take-back of the buffers deferred on s: never a walk of the live buffers.
//
// When the wait fails, s stays known and nothing is taken back: a stream capturing a CUDA graph
// is refused with an error matching cuda.ErrCapturing (end the capture first), and a context
// that refuses its synchronize returns the driver's error, matching ErrDeviceFault after a fault
// of the device and ErrInvalidStream otherwise. The synchronize of the context that
// answers a destroyed stream would end a capture on any stream of the context: while a stream
// the pool knows (one with buffers deferred, or seen lately) or the legacy stream (for any
// blocking stream) captures, ForgetStream of a destroyed stream waits for nothing and is refused
// the same way; call it again once the capture has ended. Meanwhile the buffers deferred on the
// destroyed stream, and those recorded on it and freed later, wait for that synchronize (made
// by the next reclaim that can), not for the stream's handle, which the driver may give to a
// new stream. The legacy stream is waited for with a point recorded there: when the driver
// cannot make its event (cuEventCreate refused), ForgetStream waits for nothing (no synchronize
// of the context, which would end a capture on a stream the pool never saw), keeps s and its
// buffers as they were, and fails with ErrOutOfMemory where the driver's memory ran out, else
// ErrRefused, saying "no event"; call it again.
//
// A pool whose memory the driver copies synchronously knows no streams: ForgetStream does
// nothing there. After the pool's memory is released it returns ErrClosed.
func (p *Pool) ForgetStream(s cuda.Stream) error {
	if p.order == nil {
		return nil
	}
	if p.released.Load() {
		return ErrClosed
	}
	p.flushAll()
	if forgetFlushed != nil {
		forgetFlushed()
	}
	err := p.order.forget(s)
	if err != nil && p.released.Load() {
		// Released meanwhile (the free of the last buffer of a closed pool), and the device
		// with it: the driver's refusals of s are the release's doing.
		return ErrClosed
	}
	if err == nil && p.order.cached.Load() != 0 {
		// Once more, for a cache that took s's list between the flush above and the forget (a
		// free that found the list before): its push is refused, and its buffers freed (s has
		// passed them). No cache takes that list after the forget (cache looks whether it left
		// the lists, and says why a cache that took it before counts in cached then).
		p.flushAll()
	}
	if err == nil && p.closed.Load() {
		p.finishClose(0)
	}
	return err
}

// forgetFlushed, when set (by tests), runs in ForgetStream between its first flush of the
// FreeAsync caches and the forget.
var forgetFlushed func()

// forgetWaitsWaits, when set (by tests), runs in forget when it waits for the WaitStreams calls
// in progress (forgetMu).
var forgetWaitsWaits func()

// forget is ForgetStream. Live buffers whose tags name s learn that it was forgotten when
// they are freed (streamq's Lists.GetKnown, which makes no list for a forgotten stream, in
// deferTagged and deferShared), so that forgetting costs O(1) beyond s's own deferred buffers.
//
// It waits first and forgets after: a stream marked forgotten is one whose work has passed
// (the frees of the live buffers recorded on it stop waiting for it), so a wait that fails
// leaves s as it was, known and waited for. A stream a capture holds is refused before the
// synchronize of the context, which would invalidate the capture, and so is any stream while a
// capture holds one the pool knows or the legacy stream (streamq's Lists.Captured).
func (o *streamOrder) forget(s cuda.Stream) error {
	const kept = "it stays known, and the buffers deferred or recorded on it wait for it"
	o.reclMu.Lock()
	defer o.reclMu.Unlock()
	if err := o.waitFor(s, o.lists.Lookup(uintptr(s))); err != nil {
		switch streamSentinel(err) {
		case nil: // a capture holds s
			return fmt.Errorf("pinned: forget stream %#x: %w; %s", s, err, kept)
		case ErrDeviceFault: // the context runs no more work: no wait passes
			return fmt.Errorf("%w: forget stream %#x: %w; %s", ErrDeviceFault, s, err, kept)
		}
		if errors.Is(err, streamq.ErrNoEvent) {
			// A default stream's point got no event: s was not asked, and is not refused. The
			// synchronize of the context would wait for every stream's work, and end a capture
			// on a stream the pool never saw (the driver lists no captures).
			return streamError(fmt.Sprintf("forget stream %#x", s), fmt.Errorf("%w; %s", err, kept))
		}
		// Destroyed already, most likely: the context's synchronize waits for its work, and
		// would end a capture on any stream.
		c, held, err2 := o.lists.WaitAllUncaptured()
		if held || err2 != nil {
			o.loseRefused(s, err)
		}
		if held {
			return fmt.Errorf("pinned: forget stream %#x: its wait failed (%v), and the synchronize of the context that would wait for its work instead would end the CUDA graph capture on stream %#x: %w; %s",
				s, err, c, pinmalloc.ErrCapturing, kept)
		}
		if err2 == nil && o.lists.Lost() > 0 {
			// The synchronize answered the lists lost on refused streams, s's among them (a
			// reclaim's poll, or a ForgetStream refused before, found it so): their buffers
			// come back (Recover, whose own synchronize finds nothing left to wait for), and
			// s's list is one Release may let go.
			o.done, err2 = o.lists.Recover(o.done, afterLostSync)
		}
		if err2 != nil {
			return forgetRefused(s, err, err2, kept)
		}
	}
	if !o.forgetMu.TryLock() { // a WaitStreams between its look at s and its wait
		if forgetWaitsWaits != nil {
			forgetWaitsWaits()
		}
		o.forgetMu.Lock()
	}
	l := o.lists.Forget(uintptr(s))
	o.forgetMu.Unlock()
	if l != nil {
		o.done = o.lists.Release(l, o.done)
	}
	err := o.freeDone(nil)
	if invariants.Enabled {
		o.mustVerify()
	}
	return err
}

// loseRefused keeps the list of s (made if s has none) lost for a synchronize of the context
// (streamq's Lists.Lose), when err, the driver's refusal of a wait for s that no synchronize of
// the context could answer, refused s's handle itself (destroyed): the driver may give the
// handle to a new stream before that synchronize, whose answers say nothing of s's work, so the
// buffers deferred on s, and those recorded on it and freed later (they go on its list), wait
// for that synchronize, made by the next reclaim that can (Recover), not for the handle.
// reclMu is held.
func (o *streamOrder) loseRefused(s cuda.Stream, err error) {
	if errors.Is(err, pinmalloc.ErrInvalidHandle) {
		o.lists.Lose(o.list(s), err)
	}
}

// forgetRefused is ForgetStream's error when the wait for s failed with cause and the
// synchronize of the context that would wait for its work instead failed with err: the
// driver's errors, both kept (cause said only when it differs from err), with this package's
// sentinel (ErrDeviceFault after a fault, ErrInvalidStream otherwise), or matching
// cuda.ErrCapturing when a capture refused the synchronize.
func forgetRefused(s cuda.Stream, cause, err error, kept string) error {
	also := fmt.Sprintf(" (%v)", cause)
	if c, ok := cuda.ResultCode(cause); ok {
		if e, _ := cuda.ResultCode(err); e == c {
			also = ""
		}
	}
	sentinel := streamSentinel(err)
	if sentinel == nil {
		return fmt.Errorf("pinned: forget stream %#x: its wait failed%s, and the synchronize of "+
			"the context that would wait for its work instead was refused: %w; %s", s, also, err, kept)
	}
	return fmt.Errorf("%w: forget stream %#x: its wait failed%s, and so did the synchronize of "+
		"the context that would wait for its work instead: %w; %s", sentinel, s, also, err, kept)
}

// waitFor returns once s (of list l, or nil) has passed everything queued on it: at once when a
// query finds it idle, else after a synchronize (streamq's Points: the legacy stream's implicit
// order included).
func (o *streamOrder) waitFor(s cuda.Stream, l *streamList) error {
	var idle bool
	var err error
	if l != nil {
		idle, err = o.lists.Idle(l)
	} else {
		idle, err = o.points().Idle(uintptr(s), false) // its flags unknown: blocking, conservatively
	}
	if err != nil || idle {
		return err
	}
	return o.points().WaitStream(uintptr(s))
}
