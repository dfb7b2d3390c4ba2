package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakePollRacingCaptureBegin: a user begins a capture on s, on another thread, while a
// poll has found s not capturing and is about to query it (stopped there by the fake's pause).
// The query then was made on the capturing stream: the driver refused it, invalidating the
// user's capture (their StreamEndCapture failed), and the poll lost the list. The poll holds
// the capture gate from its ask to its last act, so the begin waits for the poll: the capture
// stays valid, and the item comes back only once s has passed its point, after the capture.
func TestFakePollRacingCaptureBegin(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 2)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(s), 1)
	if err := f.PauseAfterCaptureCheck(dev); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		done []int
		err  error
	}
	polled := make(chan answer, 1)
	go func() {
		done, err := ls.Poll(nil)
		polled <- answer{done, err}
	}()
	th := fakecuda.LockedThread(t)
	_, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(s, cuda.CaptureGlobal) })
	a := <-polled
	if err := begun(); err != nil {
		t.Fatal(err)
	}
	ended := th(func() error {
		g, err := dev.StreamEndCapture(s)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	})
	if err := <-ended; err != nil {
		t.Fatalf("the user's capture was invalidated by the poll (which returned %v, %v): %v",
			a.done, a.err, err)
	}
	if a.err != nil || len(a.done) != 0 {
		t.Fatalf("the poll racing the begin = %v, %v; want nothing back, no error", a.done, a.err)
	}
	if done, err := ls.Poll(nil); err != nil || len(done) != 0 {
		t.Fatalf("a poll after the capture, s's work held = %v, %v; want nothing back", done, err)
	}
	f.Hold(false)
	if done, err := ls.Poll(nil); err != nil || len(done) != 1 {
		t.Fatalf("a poll once s ran its work = %v, %v; want the item", done, err)
	}
}

// TestFakePollRecordRacingForeignCapture: a capture begun by another binding of the driver (which
// the capture gate cannot hold off) between the ask of a poll's record and the record, on a
// stream with work in flight, takes the record into its graph: the event stands for no point of
// the stream (a query after the capture finds it complete at once). The poll must not take it
// for the items' point: they stay until the stream has run its work, and the event is let go.
func TestFakePollRecordRacingForeignCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	s := ss[0] // non-blocking: the poll's checks are of s alone, its own and the record's ask
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1} }, 2)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(s), 1)
	if err := f.PauseAfterCaptureChecks(dev, 1); err != nil { // the record's ask
		t.Fatal(err)
	}
	type answer struct {
		done []int
		err  error
	}
	polled := make(chan answer, 1)
	go func() {
		done, err := ls.Poll(nil)
		polled <- answer{done, err}
	}()
	f.WaitPaused(t)
	th := fakecuda.LockedThread(t)
	begin := func() error { return dev.StreamBeginCaptureUngated(s, cuda.CaptureGlobal) }
	if err := <-th(begin); err != nil {
		f.ResumeCall()
		t.Fatal(err)
	}
	f.ResumeCall()
	a := <-polled
	ended := th(func() error {
		g, err := dev.StreamEndCapture(s)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	})
	if err := <-ended; err != nil {
		t.Fatalf("the capture was invalidated (the poll returned %v, %v): %v", a.done, a.err, err)
	}
	if a.err != nil || len(a.done) != 0 {
		t.Fatalf("the poll whose record the capture took = %v, %v; want nothing back, no error",
			a.done, a.err)
	}
	if done, err := ls.Poll(nil); err != nil || len(done) != 0 {
		t.Fatalf("a poll after the capture, s's work held = %v, %v (%d calls pending); want nothing back",
			done, err, f.Pending())
	}
	if n := cuda.TaintedHeld(); n != 0 {
		t.Fatalf("the lists keep %d events a capture took", n)
	}
	f.Hold(false)
	if done, err := ls.Poll(nil); err != nil || len(done) != 1 {
		t.Fatalf("a poll once s ran its work = %v, %v; want the item", done, err)
	}
	if err := cuda.DestroyLetGo(dev); err != nil { // the graph that named it is destroyed
		t.Fatal(err)
	}
}
