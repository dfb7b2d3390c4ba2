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
// event recorded there would be a node of the user's graph, recorded again at every launch.
//
// So before Points queries, synchronizes or records a point in a stream on its own account
// (a poll, a purge, a drain), it asks Capturing, the one question a capture allows: a
// capturing stream counts as running, its items wait, and nothing is recorded there. The ask
// is made only where a query or a record would be made anyway.

// Capturing reports whether a CUDA graph capture holds s, so that no query, synchronize or
// point may touch it now: s captures (cuStreamIsCapturing, which invalidates nothing), or s is
// a default stream while a blocking stream of the context captures (the driver then answers
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). A driver that cannot say (one without
// cuStreamIsCapturing) or a stream it refuses answers false: the query that follows reports
// the refusal.
func (p *Points) Capturing(s Stream) bool {
	st, err := p.dev.StreamIsCapturing(s)
	if err != nil {
		return errors.Is(err, pinmalloc.ErrCapturing)
	}
	return st != cuda.CaptureNone
}

// capturingError is the refusal of a wait for, or a point in, s while a capture holds it.
func capturingError(s Stream) error {
	return fmt.Errorf("streamq: stream %#x is capturing a CUDA graph (or the legacy stream, while a blocking stream does): %w", s, pinmalloc.ErrCapturing)
}
