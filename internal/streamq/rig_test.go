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
	return testStream(t, dev, false)
}

// testStream makes a stream of dev, non-blocking or not, synchronized and destroyed when the
// test ends.
func testStream(t *testing.T, dev *cuda.Device, nonBlocking bool) streamq.Stream {
	t.Helper()
	s, err := dev.StreamCreate(nonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.StreamSynchronize(s); err != nil {
			t.Error(err)
		}
		if err := dev.StreamDestroy(s); err != nil {
			t.Error(err)
		}
	})
	return s
}

// reusedHandle makes a new non-blocking stream (testStream) and fails the test unless the fake
// gave it the handle of a, a stream destroyed since (the fake reuses a destroyed stream's
// handle for the next stream, as a driver may).
func reusedHandle(t *testing.T, dev *cuda.Device, a streamq.Stream) streamq.Stream {
	t.Helper()
	b := testStream(t, dev, true)
	if b != a {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", b, a)
	}
	return b
}

// countLists returns lists over p whose items count one each, lingering linger polls.
func countLists(p *streamq.Points, linger int) *streamq.Lists[int] {
	return streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, linger)
}

// checkedStream makes a non-blocking stream of dev, which the test destroys itself, and checks
// it into ls, returning its list; with leave, a poll then retires the list, still empty (linger
// 1), and the stream's next push follows to a new one.
func checkedStream(t *testing.T, dev *cuda.Device, ls *streamq.Lists[int], leave bool) (streamq.Stream, *streamq.List[int]) {
	t.Helper()
	a, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ls.Check(a)
	if err != nil {
		t.Fatal(err)
	}
	if !leave {
		return a, l
	}
	if _, err := ls.Poll(nil); err != nil || !l.Left() {
		t.Fatalf("poll of the empty list: error %v, left %v; want nil, true", err, l.Left())
	}
	return a, l
}
