package pinned

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeWaitStreamsRacingForgetStream: a ForgetStream of stream s, and the destroy of s after
// it, while a WaitStreams of a buffer recorded on s is between its look at whether s was
// forgotten and its wait for s. The ForgetStream waits for that WaitStreams, whose wait then
// finds s alive and returns nil. Before, the two were separate steps: the ForgetStream and the
// destroy came in between, and the wait synchronized the destroyed handle (a spurious
// ErrInvalidStream; on a driver that had given the handle to a new stream, a wait for that
// stream's work).
func TestFakeWaitStreamsRacingForgetStream(t *testing.T) {
	r := newForgetRig(t)
	if r == nil {
		return
	}
	s := r.stream(true)
	b := r.alloc(4096, 1)
	r.ok("RecordStream", r.p.RecordStream(b, s))
	forgotten := make(chan error, 1)
	blocked := make(chan struct{})
	t.Cleanup(func() { forgetWaitsWaits, waitStreamsLooked = nil, nil })
	forgetWaitsWaits = func() { close(blocked) }
	waitStreamsLooked = func(cuda.Stream) {
		waitStreamsLooked = nil
		go func() {
			err := r.p.ForgetStream(s)
			if err == nil {
				err = r.dev.StreamDestroy(icuda.Stream(s))
			}
			forgotten <- err
		}()
		select {
		case <-blocked: // the ForgetStream waits for this WaitStreams
		case err := <-forgotten: // it came in between: s destroyed under the wait
			forgotten <- err
		}
	}
	if err := r.p.WaitStreams(b); err != nil {
		t.Errorf("WaitStreams racing a ForgetStream and destroy of its buffer's stream: %v; want nil", err)
	}
	r.ok("ForgetStream and StreamDestroy", <-forgotten)
	r.done([][]byte{b})
}
