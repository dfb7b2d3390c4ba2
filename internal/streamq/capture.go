package streamq

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// CUDA graph capture. While a user captures a graph on a stream (cuStreamBeginCapture), the
// work queued there is recorded into the graph, not run, and the driver refuses a query or
// synchronize of the stream (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), a query or synchronize
// of an event recorded in it (CUDA_ERROR_CAPTURED_EVENT), a synchronize of the context, and,
// while the stream is blocking, any use of the legacy default stream
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); each refusal also invalidates the user's capture,
// whose cuStreamEndCapture then fails (the driver API's cuStreamBeginCapture_v2,
// cuStreamIsCapturing and cuThreadExchangeStreamCaptureMode; the CUDA programming guide's
// "any associated capture graphs are invalidated"; internal/fakecuda models each rule). An
// event recorded there would belong to the capture, not to the stream's work: it would stand
// for no point of the stream.
//
// So before Points queries, synchronizes or records a point in a stream on its own account
// (a poll, a purge, a drain), it asks Capturing, the one question a capture allows: a
// capturing stream counts as running, its items wait, and nothing is recorded there. The ask
// is made only where a query or a record would be made anyway.
//
// A capture may begin on another thread between the ask and the act. The ask and every act it
// allows hold the capture gate (cuda.HoldCaptureBegins; a poll holds it for a list, before the
// list's lock), for which the module's StreamBeginCapture waits: a capture begun through it
// never falls between. One begun by other code (another binding of the driver, which does not
// wait) may: a query or synchronize then invalidates it, as the driver refuses the call (its
// end fails: loud, and nothing of ours is handed back on the refusal), and a record becomes a
// node of its graph, which a query after the capture would find complete at once, as if the
// stream had passed it. The record is therefore made by cuda.Device.EventRecordOutsideCapture,
// which asks again after it: a stream found capturing then counts as running, as at the first
// ask, and the event, which the graph may record at each launch, is tainted and never taken
// for a point nor recorded again (an EventPool lets it go). The window left for such a capture
// is the time of one driver call. A begin of ours waits for a hold in progress, which may be a
// synchronize of a stream or of the context (WaitStream, Recover): a capture begins once the
// library's wait for the work queued before it is done.

// Capturing reports whether a CUDA graph capture holds s, so that no query, synchronize or
// point may touch it now: s captures (cuStreamIsCapturing, which invalidates nothing), or s is
// a default stream while a blocking stream of the context captures (the driver then answers
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). A driver that cannot say (one without
// cuStreamIsCapturing) or a stream it refuses answers false: the query that follows reports
// the refusal.
func (p *Points) Capturing(s Stream) bool {
	held, _ := captureHeld(p.dev, s)
	return held
}

// Captured returns a stream that a CUDA graph capture holds (Capturing), with held true: one of
// the caller's others (SetOthers), of the lists', of the streams Check accepted and Forget has
// not forgotten since (with a list or not: a pool's live buffer recorded on a stream names it
// after its list left), or the legacy default stream, which answers for a capture on any
// blocking stream of the context; none: 0, false. A synchronize of the context
// (Points.WaitAll) would end such a capture, and the driver refuses it then: Recover asks
// first, and so does a caller about to synchronize the context for a stream the driver refuses
// (a ForgetStream of a destroyed stream). A capture on a non-blocking stream the caller has
// never told the lists of is not seen. It asks the driver once for each stream it walks
// (cuStreamIsCapturing, which invalidates nothing). It is the reclaimer's, as Poll is.
func (ls *Lists[T]) Captured() (s Stream, held bool) {
	p := ls.points
	if ls.others != nil {
		for s := range ls.others {
			if p.Capturing(s) {
				return s, true
			}
		}
	}
	defer ls.endScan()
	for _, l := range ls.snapshot() {
		if p.Capturing(l.s) {
			return l.s, true
		}
	}
	defer ls.endSeen()
	for _, s := range ls.seenStreams() {
		if p.Capturing(s) {
			return s, true
		}
	}
	if p.Capturing(streamLegacy) {
		return streamLegacy, true
	}
	return 0, false
}

// captureHeld reports whether a capture holds s, with the driver's refusal that says so (the
// legacy stream's) or nil. It allocates nothing.
func captureHeld(dev *cuda.Device, s Stream) (bool, error) {
	st, err := dev.StreamIsCapturing(s)
	if err != nil {
		if errors.Is(err, pinmalloc.ErrCapturing) {
			return true, err
		}
		return false, nil
	}
	return st != cuda.CaptureNone, nil
}

// CaptureRefusal returns an error matching pinmalloc.ErrCapturing when a CUDA graph capture
// holds s (as Capturing says), and nil otherwise. An operation the user calls on s that would
// record, wait for, query or synchronize anything there on the library's account asks it
// first and refuses the call with its error before anything is queued: a record would belong
// to the capture and stand for no point of s, a wait would be a node of the user's graph, and a
// query or synchronize would
// invalidate the capture. The ask is one cgo call, which invalidates nothing. The error names
// s and wraps the driver's refusal where there is one (the legacy stream while a blocking
// stream captures).
func CaptureRefusal(dev *cuda.Device, s Stream) error {
	held, err := captureHeld(dev, s)
	return refusal(s, held, err)
}

// refusal is the refusal of s when a capture holds it (held), with the driver's refusal that
// says so (err, the legacy stream's) or none; nil when s is free.
func refusal(s Stream, held bool, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("stream %#x (the legacy stream, while a blocking stream captures a CUDA graph): %w", s, err)
	case held:
		return fmt.Errorf("stream %#x: %w", s, pinmalloc.ErrCapturing)
	}
	return nil
}

// RecordOutsideCapture records ev in s, unless a capture holds s: then it records nothing and
// returns the refusal CaptureRefusal would, in one cgo call
// (cuda.Device.EventRecordOutsideCapture, in the capture gate). It is the record of the
// library's own event in a user's stream, which must never be a node of the user's graph; the
// record's own error is returned as EventRecord's. When a capture that other code began
// meanwhile may have taken the record, it returns the refusal too, and ev is tainted
// (cuda.EventTainted): the caller must not record it again nor take it for a point; an
// EventPool's Put lets it go.
func RecordOutsideCapture(dev *cuda.Device, ev cuda.Event, s Stream) error {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	return RecordOutsideCaptureHeld(dev, ev, s)
}

// RecordOutsideCaptureHeld is RecordOutsideCapture for a caller that holds the capture gate
// already (cuda.HoldCaptureBegins), from a check of its own through the acts the record is for
// (a wait for the event queued on another stream, a memset): a second hold of the gate on its
// goroutine would wait for a capture begin waiting for the first.
func RecordOutsideCaptureHeld(dev *cuda.Device, ev cuda.Event, s Stream) error {
	st, err := dev.EventRecordOutsideCapture(ev, s)
	switch {
	case err != nil && errors.Is(err, pinmalloc.ErrCapturing):
		return refusal(s, true, err)
	case err != nil:
		return err
	}
	return refusal(s, st != cuda.CaptureNone, nil)
}

// capturingError is the refusal of a wait for, or a point in, s while a capture holds it.
func capturingError(s Stream) error {
	return fmt.Errorf("streamq: stream %#x is capturing a CUDA graph (or the legacy stream, while a blocking stream does): %w", s, pinmalloc.ErrCapturing)
}
