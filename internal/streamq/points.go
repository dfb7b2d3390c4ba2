package streamq

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc"
	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Points in streams: the driver half of stream-ordered reuse, which every allocator of the
// module goes through (pinned.Pool, device.Heap and uvm.Tier, by per-stream Lists).
//
// The rule it serves, everywhere: memory changes owner (is handed out again, scrubbed, given
// back) only after every stream that may use it has passed a point recorded after its free,
// an event that has completed, or a query or synchronize that found the stream idle; or it
// does not change owner. A point recorded later than the free is safe (it only makes reuse
// later); one recorded earlier is not. A stream whose work completes in order passes its
// points in order, so one point stands for every free before it on that stream.
//
// Points records events of one device (its context), from a pool: a stream of another device,
// or a handle the driver does not know, is refused at the first record.

// ErrNoEvent is the error of Check, and of every point recorded (Mark, WaitPoint, a poll's),
// when the driver could not make an event to record in the stream (cuEventCreate refused): the
// stream was not asked, and is not the cause. It is a refusal of the driver
// (pinmalloc.ErrRefused); the driver's own error, kept, matches pinmalloc.ErrOutOfMemory when
// memory ran out.
var ErrNoEvent = errkind.New(pinmalloc.ErrRefused, "no event")

// Event is a point recorded in a stream; 0 is none.
type Event = cuda.Event

// Stream is a CUDA stream handle.
type Stream = cuda.Stream

// Points records and queries points in the streams of one device.
type Points struct {
	dev    *cuda.Device
	events *cuda.EventPool
	own    bool // dev was opened for the Points: Close closes it
	// seq counts the points that the polls of every Lists on these points recorded, so that
	// Settle orders one lists' points against its peers' (List.seq).
	seq atomic.Uint64
	// syncs numbers the synchronizes of the context (WaitAll) as they start, and synced is the
	// number of the latest one that succeeded (SyncMark, SyncedSince).
	syncs, synced atomic.Uint64
}

// NewPoints returns the points of dev, whose events come from events (a pool of dev's).
func NewPoints(dev *cuda.Device, events *cuda.EventPool) *Points {
	return &Points{dev: dev, events: events}
}

// PointsOf returns the points of dev, with a pool of events of its own.
func PointsOf(dev *cuda.Device) *Points { return NewPoints(dev, cuda.NewEventPool(dev)) }

// Open returns the points of device ordinal, opened for them (Close closes it); nil, and no
// error, when there is no driver or no such device: nothing then copies asynchronously.
func Open(ordinal int) (*Points, error) {
	dev, err := cuda.Open(ordinal)
	if errors.Is(err, pinmalloc.ErrNoDriver) || errors.Is(err, pinmalloc.ErrNoDevice) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := PointsOf(dev)
	p.own = true
	return p, nil
}

// Of returns the points of pub, a device of the public binding, with events of their own.
func Of(pub *pubcuda.Device) (*Points, error) {
	dev, err := cuda.Of(pub)
	if err != nil {
		return nil, err
	}
	return PointsOf(dev), nil
}

// Close destroys the events (all must be back) and closes the device if it was opened for
// the points.
func (p *Points) Close() error {
	err := p.events.Close()
	if p.own {
		err = errors.Join(err, p.dev.Close())
	}
	return err
}

// Context is the device's context: a stream of another context is not one of its streams.
func (p *Points) Context() uintptr { return p.dev.Context() }

// Ordinal is the device's ordinal.
func (p *Points) Ordinal() int { return p.dev.Ordinal() }

// Check reports whether the driver accepts s as a stream of the device, by recording a point
// in it (an error: not). A stream a capture holds gets no point (it would belong to the
// capture and stand for no point of s, while the event went on to serve as a point of other
// streams): it is asked its context instead (cuStreamGetCtx, which a capture
// allows), and one of another context (another device's stream) is refused, as the point
// would have been. A driver without that call accepts it. An event the driver cannot make
// (cuEventCreate refused, out of memory or not) leaves s unasked: an error matching
// ErrNoEvent, and the driver's.
func (p *Points) Check(s Stream) error {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return p.sameContext(s)
	}
	ev, err := p.events.Get()
	if err != nil {
		return fmt.Errorf("%w to ask stream %#x with: %w", ErrNoEvent, s, err)
	}
	ev, held, err := p.record(ev, s)
	if held { // a capture begun meanwhile, by code that does not wait for the gate
		err = p.sameContext(s)
	} else if err == nil {
		p.Put(ev)
	}
	return err
}

// sameContext refuses s, a stream a capture holds, when the driver says it belongs to another
// context than the device's (Check); the caller's error names s.
func (p *Points) sameContext(s Stream) error {
	c, err := p.dev.StreamContext(s)
	switch {
	case errors.Is(err, pinmalloc.ErrSymbol):
		return nil // the driver cannot say: the stream is taken on trust, as it was
	case err != nil:
		return err
	case c != p.Context():
		return fmt.Errorf("a capturing stream of context %#x, not the device's %#x: %w", c, p.Context(), pinmalloc.ErrInvalidHandle)
	}
	return nil
}

// Mark records a point in s, after everything queued on it so far. The caller owns it until
// it puts it back (Put). A stream a capture holds (Capturing) is refused: an error matching
// pinmalloc.ErrCapturing. An event the driver cannot make leaves s unasked: an error matching
// ErrNoEvent, and the driver's.
func (p *Points) Mark(s Stream) (Event, error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return 0, capturingError(s)
	}
	ev, held, err := p.mark(s)
	if held {
		return 0, capturingError(s)
	}
	return ev, err
}

// mark is Mark of a stream the caller has found no capture holds, with the capture gate held
// (capture.go). The record asks the driver again, before and after it: held reports a capture
// begun meanwhile by code that does not wait for the gate, and no point (the event, which the
// capture may have taken, left to the pool, which lets it go). An event the driver cannot make
// is ErrNoEvent (Mark).
func (p *Points) mark(s Stream) (ev Event, held bool, err error) {
	if ev, err = p.events.Get(); err != nil {
		return 0, false, fmt.Errorf("%w to record a point with: %w", ErrNoEvent, err)
	}
	return p.record(ev, s)
}

// record is mark with ev, an event of the pool, taken: it goes back to the pool unless it is
// returned.
func (p *Points) record(ev Event, s Stream) (Event, bool, error) {
	st, err := p.dev.EventRecordOutsideCapture(ev, s)
	if err != nil || st != cuda.CaptureNone {
		p.events.Put(ev)
		held := st != cuda.CaptureNone || errors.Is(err, pinmalloc.ErrCapturing)
		if held {
			err = nil
		}
		return 0, held, err
	}
	return ev, false, nil
}

// Passed reports whether the stream of ev has passed it (an error: the driver refuses ev).
func (p *Points) Passed(ev Event) (bool, error) {
	return done(p.dev.EventQuery(ev))
}

// Idle reports whether s has passed everything ordered before now: a point now, at no cost of
// an event (an error: the driver refuses s). That is s found idle (cuStreamQuery) and, unless
// nonBlocking says s was created non-blocking (NonBlocking), the legacy default stream found
// idle too: a blocking stream's operations also wait for the legacy stream's earlier work
// (stream-sync-behavior). It is never true for the legacy stream itself, nor the per-thread
// default stream: their operations wait for the earlier work of every blocking stream, which
// no query can see, and a point recorded in them (Mark) waits for it. Lists.Idle asks
// NonBlocking once per list.
func (p *Points) Idle(s Stream, nonBlocking bool) (bool, error) {
	if DefaultStream(s) {
		return false, nil
	}
	idle, _, err := p.IdleQuiet(s, nonBlocking)
	return idle, err
}

// IdleQuiet is Idle, and Quiet from the same query of s: a point recorded in s next, when s is
// not idle, waits only for the work s's order puts before it when quiet is set. A default
// stream is asked that query alone (it is never idle). A stream a capture holds, or a
// blocking one while a capture holds the legacy stream, is not idle (Capturing).
func (p *Points) IdleQuiet(s Stream, nonBlocking bool) (idle, quiet bool, err error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return false, false, nil
	}
	return p.idleQuiet(s, nonBlocking)
}

// idleQuiet is IdleQuiet of a stream the caller has found no capture holds, with the capture
// gate held.
func (p *Points) idleQuiet(s Stream, nonBlocking bool) (idle, quiet bool, err error) {
	if quiet, err = p.quiet(s); err != nil || !quiet {
		return false, false, err
	}
	if DefaultStream(s) {
		return false, true, nil
	}
	if !nonBlocking {
		if p.Capturing(streamLegacy) {
			return false, true, nil
		}
		idle, err = done(p.dev.StreamQuery(streamLegacy))
		return idle, true, err
	}
	return true, true, nil
}

// NonBlocking reports whether s was created non-blocking (cuStreamGetFlags): its work is not
// ordered against the legacy default stream's. The default streams are not.
func (p *Points) NonBlocking(s Stream) (bool, error) {
	if DefaultStream(s) {
		return false, nil
	}
	return p.dev.StreamNonBlocking(s)
}

// DefaultStream reports whether s is a default stream, whose work is ordered after every
// blocking stream's earlier work (the per-thread one's after the legacy stream's, treated
// alike: conservative): no query of s alone says it has passed a point now.
func DefaultStream(s Stream) bool {
	return s == streamLegacy || s == streamLegacyHandle || s == PerThreadStream
}

// The default streams' handles (cuda.h: 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
// PerThreadStream names the calling OS thread's default stream: a point recorded on it by a
// later poll, on another thread, would be another stream's, so a user of lazy points refuses
// it (pinned, device).
const (
	streamLegacy       Stream = 0
	streamLegacyHandle Stream = 1
	PerThreadStream    Stream = 2
)

// done maps a query's answer: nil is done, ErrNotReady is not, any other is an error.
func done(err error) (bool, error) {
	if errors.Is(err, pinmalloc.ErrNotReady) {
		return false, nil
	}
	return err == nil, err
}

// WaitStream waits until s has passed everything ordered before now: s synchronized and, as
// for Idle, the legacy default stream too (a blocking stream's work comes after its earlier
// work), or for a default stream a point in the legacy stream (WaitPoint: its work comes after
// every blocking stream's, which that point waits for too). Not a synchronize of the context:
// the driver refuses one while any stream of the context captures a CUDA graph, and ends that
// capture, on a stream the caller may never have seen.
//
// A stream a capture holds (Capturing), or a blocking one while a capture holds the legacy
// stream, is refused: an error matching pinmalloc.ErrCapturing, its work not waited for (it
// runs only when the user launches the graph).
func (p *Points) WaitStream(s Stream) error {
	if DefaultStream(s) {
		if p.Capturing(s) {
			return capturingError(s)
		}
		return p.WaitPoint(streamLegacy) // the legacy stream's own handle: 2 names a thread's
	}
	cuda.HoldCaptureBegins() // a begin waits for the synchronize: see capture.go
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return capturingError(s)
	}
	if err := p.dev.StreamSynchronize(s); err != nil {
		return err
	}
	if p.Capturing(streamLegacy) {
		// A blocking stream captures: a non-blocking s's work is not ordered after the legacy
		// stream's, which no call may touch now; a blocking s's is.
		if nb, err := p.NonBlocking(s); err != nil || !nb {
			return capturingError(streamLegacy)
		}
		return nil
	}
	return p.dev.StreamSynchronize(streamLegacy)
}

// SyncUncaptured synchronizes s (cuStreamSynchronize) unless a CUDA graph capture holds it
// (Capturing): then it waits for nothing and returns captured true, as the synchronize would
// end the capture. It holds the capture gate from its ask to the synchronize, so that a capture
// begun through package cuda on another goroutine meanwhile waits for it rather than begin
// between the two and be invalidated. It needs no event: the wait of a caller whose event the
// driver could not make.
func (p *Points) SyncUncaptured(s Stream) (captured bool, err error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return true, nil
	}
	return false, p.dev.StreamSynchronize(s)
}

// WaitPoint records a point in s and waits until s has passed it (cuEventSynchronize): s's
// work queued before now and, for a blocking stream, the legacy default stream's earlier work;
// for a default stream, every blocking stream's earlier work (seen by the caller or not), as
// its own operations wait for it, but not non-blocking streams' (whose work a free on the
// default stream comes after only through the events that stream waits for, which the point
// waits for too). An event the driver cannot make waits for nothing: an error matching
// ErrNoEvent (Mark).
func (p *Points) WaitPoint(s Stream) error {
	ev, err := p.Mark(s)
	if err != nil {
		return err
	}
	defer p.Put(ev)
	return p.Wait(ev)
}

// WaitLegacyOrder waits for the work the legacy default stream's implicit order puts before
// work queued now on a blocking stream: the legacy stream's earlier work (a synchronize of
// it); with dflt, before work on a default stream too: every blocking stream's earlier work
// (a point in the legacy stream, WaitPoint; not a synchronize of the context, which the driver
// refuses while any stream captures, ending that capture). A stream's own synchronize covers
// neither: call it before memory a blocking or default stream freed changes owner on that
// stream's synchronize alone (a device heap's trim).
//
// While a blocking stream captures a CUDA graph (Capturing of the legacy stream), it waits for
// nothing: an error matching pinmalloc.ErrCapturing.
func (p *Points) WaitLegacyOrder(dflt bool) error {
	if dflt {
		if p.Capturing(streamLegacy) {
			return capturingError(streamLegacy)
		}
		if err := p.WaitPoint(streamLegacy); err != nil { // Mark asks again, in the gate
			return fmt.Errorf("wait for a point in the legacy stream: %w", err)
		}
		return nil
	}
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(streamLegacy) {
		return capturingError(streamLegacy)
	}
	if err := p.dev.StreamSynchronize(streamLegacy); err != nil {
		return fmt.Errorf("synchronize the legacy stream: %w", err)
	}
	return nil
}

// WaitLegacy waits for the work queued on the legacy default stream, after a synchronous copy
// or memset that succeeded (err nil; an error is returned as it is). cuMemcpyHtoD from
// pageable memory returns once the source is staged, with the DMA to the device possibly still
// in flight, and cuMemcpyDtoD and cuMemsetD8 of device memory return before they have run (the
// driver API's "API synchronization behavior"): without the wait, work on a non-blocking
// stream, which does not wait for the legacy stream, could run before them.
func (p *Points) WaitLegacy(err error) error {
	if err != nil {
		return err
	}
	return p.dev.StreamSynchronize(streamLegacy)
}

// Running returns the first of streams ss that has work queued and not run (cuStreamQuery),
// or the legacy default stream when one of ss is blocking and it has (its earlier work is
// ordered before theirs); running false when none has. A stream a capture holds counts as
// running (Capturing), and so does the legacy stream while a blocking stream captures.
//
// A stream whose query the driver refuses is not idle: a destroyed stream's handle is refused
// while the work queued on it still runs (cuStreamDestroy returns at once), so the refusal
// says nothing of that work. When no stream is found running, Running returns the first such
// stream, running false, with the driver's error (the legacy stream's query, when it fails,
// comes first); only a synchronize of the context (WaitAll) waits for its work. It counts as
// blocking too: nothing says it is not.
//
// The other streams are asked before the default ones (answered by the legacy stream's query,
// once, as the first default stream among ss): a default stream found running means that
// every other stream of ss is idle.
func (p *Points) Running(ss []Stream) (s Stream, running bool, err error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	blocking, legacy, named := false, Stream(streamLegacy), false
	var refused Stream // the first stream of ss whose query the driver refused, with rerr
	var rerr error
	for _, s := range ss {
		if DefaultStream(s) {
			if !named {
				blocking, legacy, named = true, s, true
			}
			continue
		}
		if p.Capturing(s) {
			return s, true, nil
		}
		if err := p.dev.StreamQuery(s); errors.Is(err, pinmalloc.ErrNotReady) {
			return s, true, nil
		} else if err != nil && rerr == nil {
			refused, rerr = s, err
		}
		if !blocking {
			nb, err := p.NonBlocking(s)
			blocking = err != nil || !nb
		}
	}
	if blocking {
		if p.Capturing(streamLegacy) {
			return legacy, true, nil
		}
		if err := p.dev.StreamQuery(streamLegacy); errors.Is(err, pinmalloc.ErrNotReady) {
			return legacy, true, nil
		} else if err != nil {
			return legacy, false, err
		}
	}
	if rerr != nil {
		return refused, false, rerr
	}
	return 0, false, nil
}

// Quiet reports whether s has run all its own work (cuStreamQuery), not the work its order
// puts before it, which Idle asks about too: a point recorded in s next waits only for that
// (a blocking stream's, the legacy stream's earlier work; a default stream's, every blocking
// stream's). A stream a capture holds is not quiet (Capturing).
func (p *Points) Quiet(s Stream) (bool, error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if p.Capturing(s) {
		return false, nil
	}
	return p.quiet(s)
}

// quiet is Quiet of a stream the caller has found no capture holds, with the capture gate held.
func (p *Points) quiet(s Stream) (bool, error) { return done(p.dev.StreamQuery(s)) }

// Wait waits until the stream of ev has passed it (cuEventSynchronize).
func (p *Points) Wait(ev Event) error { return p.dev.EventSynchronize(ev) }

// WaitAll waits until every stream of the device's context has completed everything queued on
// it: the answer for streams the driver refuses (destroyed), whose work it still runs. One that
// succeeds counts for SyncedSince.
func (p *Points) WaitAll() error {
	n := p.syncs.Add(1)
	if err := p.dev.Synchronize(); err != nil {
		return err
	}
	for {
		if old := p.synced.Load(); old >= n || p.synced.CompareAndSwap(old, n) {
			return nil
		}
	}
}

// SyncMark returns a mark of now for SyncedSince. Safe for concurrent use.
func (p *Points) SyncMark() uint64 { return p.syncs.Load() }

// SyncedSince reports whether a synchronize of the context (WaitAll) that started after mark
// (SyncMark) has succeeded: everything queued in the context before the mark has completed, the
// work of streams destroyed since included. Safe for concurrent use; it costs an atomic load.
func (p *Points) SyncedSince(mark uint64) bool { return p.synced.Load() > mark }

// Put gives ev back to the pool.
func (p *Points) Put(ev Event) { p.events.Put(ev) }
