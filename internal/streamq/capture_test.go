package streamq_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// A user's CUDA graph capture on a stream the lists have seen: while a stream captures, the
// driver refuses a query or synchronize of it, of an event recorded in it, of the context and,
// while the stream is blocking, of the legacy stream, and each refusal invalidates the user's
// capture (internal/fakecuda, "Stream capture"). A capturing stream counts as running: its
// items wait, nothing is recorded in it, and the capture stays valid.

// beginCapture begins a capture on s, the test's goroutine locked to its thread until the
// test ends (a capture in CaptureGlobal mode ends on the thread that began it).
func beginCapture(t *testing.T, dev *cuda.Device, s cuda.Stream) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if err := dev.StreamBeginCapture(s, cuda.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
}

// endCapture ends the capture on s, failing the test unless it gives a graph.
func endCapture(t *testing.T, dev *cuda.Device, s cuda.Stream) {
	t.Helper()
	g, err := dev.StreamEndCapture(s)
	if err != nil {
		t.Fatalf("the user's capture was invalidated: %v", err)
	}
	if err := dev.GraphDestroy(g); err != nil {
		t.Fatal(err)
	}
}

// TestPollDuringCapture: items pushed on a stream with work queued, polled while the stream
// captures (the poll that gives them a point, then the one that finds it), wait, with no
// error and the capture still valid; polled after it, they come back.
func TestPollDuringCapture(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		f, dev := fakecuda.RunDevice(t)
		if f == nil {
			return
		}
		ss, bufs, p, _ := testStreams(t, dev, 1)
		s := ss[0]
		if blocking {
			s = blockingStream(t, dev)
		}
		ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 2)
		f.Hold(true)
		if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
			t.Fatal(err)
		}
		ls.Push(ls.Get(s), 1)
		beginCapture(t, dev, s)
		for i := range 2 {
			done, err := ls.Poll(nil)
			if err != nil || len(done) != 0 {
				t.Fatalf("blocking %v: poll %d during the capture = %v, %v; want nothing back, no error", blocking, i, done, err)
			}
		}
		ls.Push(ls.Get(s), 2) // pushed during the capture
		if done, err := ls.Poll(nil); err != nil || len(done) != 0 {
			t.Fatalf("blocking %v: poll after a push during the capture = %v, %v; want nothing back, no error", blocking, done, err)
		}
		endCapture(t, dev, s)
		f.Hold(false)
		if done, err := ls.Poll(nil); err != nil || len(done) != 2 {
			t.Fatalf("blocking %v: poll after the capture = %v, %v; want both items", blocking, done, err)
		}
		if _, err := ls.Drain(nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunningDuringCapture: Points.Running counts a capturing stream as running (it has work
// queued that no query may see), and asking leaves the capture valid; with a blocking stream
// capturing, the legacy stream is running too.
func TestRunningDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 2)
	b := blockingStream(t, dev)
	for _, c := range []struct {
		capture cuda.Stream
		ask     []cuda.Stream
	}{{ss[0], []cuda.Stream{ss[1], ss[0]}}, {b, []cuda.Stream{ss[1], b}}, {b, []cuda.Stream{0}}} {
		beginCapture(t, dev, c.capture)
		s, running, err := p.Running(c.ask)
		if err != nil || !running {
			t.Errorf("Running(%#x) while %#x captures = %#x, %v, %v; want running", c.ask, c.capture, s, running, err)
		}
		endCapture(t, dev, c.capture)
	}
}

// TestCheckDuringCapture: the first sight of a capturing stream (Lists.Check, as a FreeAsync,
// RecordStream or Alloc on a new stream makes) accepts it without recording a point there:
// the record would be a node of the user's graph, which would record the pool's event again
// at every launch of the graph while the event served as another stream's point.
func TestCheckDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 1)
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 2)
	beginCapture(t, dev, ss[0])
	records := f.Stat(fakecuda.EventRecords)
	if _, err := ls.Check(ss[0]); err != nil {
		t.Errorf("Check of a capturing stream: %v", err)
	}
	if n := f.Stat(fakecuda.EventRecords) - records; n != 0 {
		t.Errorf("Check of a capturing stream recorded %d events in the user's graph", n)
	}
	endCapture(t, dev, ss[0])
}

// TestRecordOutsideCapture: RecordOutsideCapture records in a stream no capture holds, and in
// a capturing stream, or in the legacy stream while a blocking stream captures, records
// nothing and refuses with an error matching pinmalloc.ErrCapturing (the legacy stream's
// wrapping the driver's CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); CaptureRefusal answers the same;
// the capture stays valid.
func TestRecordOutsideCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, _, events := testStreams(t, dev, 1)
	b := blockingStream(t, dev)
	ev, err := events.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer events.Put(ev)
	records := f.Stat(fakecuda.EventRecords)
	if err := streamq.RecordOutsideCapture(dev, ev, ss[0]); err != nil || f.Stat(fakecuda.EventRecords) != records+1 {
		t.Fatalf("RecordOutsideCapture in a stream no capture holds = %v, %d records; want one", err, f.Stat(fakecuda.EventRecords)-records)
	}
	for _, c := range []struct {
		capture, s cuda.Stream
		code       int
	}{{ss[0], ss[0], 0}, {b, b, 0}, {b, 0, 906}} {
		beginCapture(t, dev, c.capture)
		records := f.Stat(fakecuda.EventRecords)
		for _, err := range []error{streamq.RecordOutsideCapture(dev, ev, c.s), streamq.CaptureRefusal(dev, c.s)} {
			var r cuda.Result
			if !errors.Is(err, pinmalloc.ErrCapturing) || c.code != 0 && (!errors.As(err, &r) || int(r) != c.code) {
				t.Errorf("stream %#x while %#x captures: %v; want ErrCapturing (driver's code %d)", c.s, c.capture, err, c.code)
			}
		}
		if n := f.Stat(fakecuda.EventRecords) - records; n != 0 {
			t.Errorf("stream %#x while %#x captures: %d events recorded", c.s, c.capture, n)
		}
		endCapture(t, dev, c.capture)
	}
}

// TestCapturedAsksOthers: Lists.Captured names a capturing stream among the caller's others
// (SetOthers), which have no list, the lists' own, and the legacy stream for a capturing
// blocking stream of neither, and asking leaves each capture valid. Recover of a list lost to a
// destroyed stream synchronizes nothing while another stream captures (the synchronize of the
// context would end the capture): its items stay until a Recover after the capture, and Reclaim
// and Recover say so with an error matching ErrCapturing (they returned nil, as if answered).
func TestCapturedAsksOthers(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 2)
	b := blockingStream(t, dev)
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 2)
	ls.SetOthers(func(yield func(streamq.Stream) bool) { yield(ss[1]) })
	ls.Get(ss[0])
	if s, held := ls.Captured(); held {
		t.Fatalf("Captured with no capture = %#x, true", s)
	}
	for _, c := range []struct{ capture, want cuda.Stream }{{ss[1], ss[1]}, {ss[0], ss[0]}, {b, 0}} {
		beginCapture(t, dev, c.capture)
		if s, held := ls.Captured(); !held || s != c.want {
			t.Errorf("Captured while %#x captures = %#x, %v; want %#x, true", c.capture, s, held, c.want)
		}
		endCapture(t, dev, c.capture)
	}

	gone, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	f.Hold(true)
	defer f.Hold(false)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, gone); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(gone), 7)
	if err := dev.StreamDestroy(gone); err != nil { // its memset still queued
		t.Fatal(err)
	}
	beginCapture(t, dev, ss[1])
	done, err := ls.Reclaim(nil, nil)
	rdone, rerr := ls.Recover(nil, nil)
	endCapture(t, dev, ss[1])
	if len(done) != 0 || ls.Lost() != 1 || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("Reclaim while a stream of the caller's captures = %v, %v, %d lost; want nothing back, the list kept, ErrCapturing", done, err, ls.Lost())
	}
	if len(rdone) != 0 || !errors.Is(rerr, pinmalloc.ErrCapturing) {
		t.Fatalf("Recover while a stream of the caller's captures = %v, %v; want nothing back, ErrCapturing", rdone, rerr)
	}
	if done, err = ls.Recover(nil, nil); err != nil || len(done) != 1 || done[0] != 7 {
		t.Fatalf("Recover after the capture = %v, %v; want [7]", done, err)
	}
	if f.Pending() != 0 {
		t.Errorf("the item came back with the destroyed stream's memset still queued")
	}
}

// TestDefaultStreamWaitsBesideCapture: the waits for a default stream (WaitStream of the legacy
// stream, WaitLegacyOrder for a default stream's memory) while a user captures a graph on a
// non-blocking stream wait for the legacy stream's work and for every blocking stream's earlier
// work, with no error, and leave the capture valid. They synchronized the context, which the
// driver refuses while any stream of it captures, ending the capture.
func TestDefaultStreamWaitsBesideCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 2)
	captured, b := ss[0], blockingStream(t, dev)
	defer f.Hold(false)
	for _, c := range []struct {
		name string
		wait func() error
	}{
		{"WaitStream of the legacy stream", func() error { return p.WaitStream(0) }},
		{"WaitStream of CU_STREAM_LEGACY", func() error { return p.WaitStream(1) }},
		{"WaitLegacyOrder for a default stream", func() error { return p.WaitLegacyOrder(true) }},
	} {
		f.Hold(true)
		// Held: a blocking stream's work, and the legacy stream's after it.
		if err := errors.Join(dev.MemsetD8Async(bufs[1], 1, 4096, b), dev.MemsetD8Async(bufs[1], 2, 4096, 0)); err != nil {
			t.Fatal(err)
		}
		beginCapture(t, dev, captured)
		err := c.wait()
		pending := f.Pending()
		endCapture(t, dev, captured)
		if err != nil || pending != 0 {
			t.Errorf("%s beside a capture on a non-blocking stream: %v, %d streams with work left; want nil, none", c.name, err, pending)
		}
	}
}

// TestSettleBesideCapture: Settle of a stream destroyed with work queued (a device heap's Close
// of a stream destroyed without ForgetStream), while a user captures a graph on a non-blocking
// stream the lists know without a list (one of the caller's others, or a stream seen whose list
// left), synchronizes nothing: the capturing stream is running, the capture stays valid, and the
// destroyed stream's work stays queued; after the capture, Settle synchronizes the context.
// Before, Settle asked only its own streams and the legacy stream, and its synchronize of the
// context ended the capture.
func TestSettleBesideCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 2)
	other, seen := ss[0], ss[1]
	defer f.Complete()
	for _, capture := range []cuda.Stream{other, seen} {
		ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 1)
		ls.SetOthers(func(yield func(streamq.Stream) bool) { yield(other) })
		if _, err := ls.Check(seen); err != nil {
			t.Fatal(err)
		}
		ls.Prune() // seen's list leaves; seen stays among the streams seen
		if ls.Streams() != 0 {
			t.Fatalf("%d lists after Prune; want none", ls.Streams())
		}
		gone, err := dev.StreamCreate(true)
		if err != nil {
			t.Fatal(err)
		}
		f.Hold(true)
		if err := dev.MemsetD8Async(bufs[0], 1, 4096, gone); err != nil {
			t.Fatal(err)
		}
		if err := dev.StreamDestroy(gone); err != nil { // its memset still queued
			t.Fatal(err)
		}
		beginCapture(t, dev, capture)
		_, s, running, err := ls.Settle(nil, []streamq.Stream{gone})
		pending := f.Pending()
		endCapture(t, dev, capture)
		if err != nil || !running || s != capture || pending == 0 {
			t.Fatalf("Settle of a destroyed stream while %#x captures = %#x, running %v, %v, %d streams with work; want %#x running, the work queued",
				capture, s, running, err, pending, capture)
		}
		if _, s, running, err = ls.Settle(nil, []streamq.Stream{gone}); err != nil || running || f.Pending() != 0 {
			t.Fatalf("Settle after the capture = %#x, running %v, %v, %d streams with work; want nothing running, the work run",
				s, running, err, f.Pending())
		}
		f.Hold(false)
	}
}

// TestCheckCapturingOtherDevice: the first sight of a stream of another device that captures a
// graph then (Lists.Check, as a FreeAsync during the capture makes) refuses it, as it refuses
// the stream when it does not capture, matching pinmalloc.ErrInvalidHandle, with no point
// recorded and the capture valid. Before, it was accepted: after the capture its item's point
// was refused (another device's stream), the list found lost, and Recover's synchronize of this
// device's context handed the item back with the other device's work on the stream still queued.
func TestCheckCapturingOtherDevice(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	ss, _, p, _ := testStreams(t, dev, 1)
	dev1 := f.Open(t, 1)
	s1, err := dev1.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := dev1.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		f.Complete()
		if err := errors.Join(dev1.MemFree(b1), dev1.StreamDestroy(s1)); err != nil {
			t.Error(err)
		}
	}()
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 1)
	records := f.Stat(fakecuda.EventRecords)
	beginCapture(t, dev1, s1)
	l, err := ls.Check(s1)
	endCapture(t, dev1, s1)
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) || f.Stat(fakecuda.EventRecords) != records {
		if err == nil { // what followed: an item back with device 1's work queued
			f.Hold(true)
			if err := dev1.MemsetD8Async(b1, 1, 4096, s1); err != nil {
				t.Fatal(err)
			}
			ls.Push(l, 1)
			done, rerr := ls.Reclaim(nil, nil)
			t.Errorf("then Reclaim gave %v, %v, with %d streams with work queued", done, rerr, f.Pending())
			f.Hold(false)
		}
		t.Fatalf("Check of device 1's stream while it captures: %v, %d points recorded; want ErrInvalidHandle, none", err, f.Stat(fakecuda.EventRecords)-records)
	}
	// This device's streams, capturing, are accepted as before.
	beginCapture(t, dev, ss[0])
	_, err = ls.Check(ss[0])
	endCapture(t, dev, ss[0])
	if err != nil {
		t.Fatalf("Check of this device's stream while it captures: %v", err)
	}
}
