package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// testStreams makes n streams of dev, each with a 4 KiB device buffer for the work a test
// queues on it, and Points over events, a new event pool of dev. When the test ends the streams are
// synchronized and destroyed, the buffers freed and the points closed.
func testStreams(t *testing.T, dev *cuda.Device, n int) (ss []cuda.Stream, bufs []cuda.DevicePtr, p *streamq.Points, events *cuda.EventPool) {
	t.Helper()
	ss, bufs = make([]cuda.Stream, n), make([]cuda.DevicePtr, n)
	events = cuda.NewEventPool(dev)
	p = streamq.NewPoints(dev, events)
	t.Cleanup(func() {
		for i := range ss {
			if ss[i] == 0 {
				continue
			}
			for _, err := range []error{dev.StreamSynchronize(ss[i]), dev.MemFree(bufs[i]), dev.StreamDestroy(ss[i])} {
				if err != nil {
					t.Error(err)
				}
			}
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	for i := range ss {
		s, err := dev.StreamCreate(true)
		if err != nil {
			t.Fatal(err)
		}
		b, err := dev.MemAlloc(4096)
		if err != nil {
			dev.StreamDestroy(s)
			t.Fatal(err)
		}
		ss[i], bufs[i] = s, b
	}
	return ss, bufs, p, events
}

// blockingStream makes a blocking stream of dev (ordered with the legacy default stream),
// synchronized and destroyed when the test ends.
func blockingStream(t *testing.T, dev *cuda.Device) streamq.Stream {
	t.Helper()
	b, err := dev.StreamCreate(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.StreamSynchronize(b); err != nil {
			t.Error(err)
		}
		if err := dev.StreamDestroy(b); err != nil {
			t.Error(err)
		}
	})
	return b
}
