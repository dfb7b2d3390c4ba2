package streamq_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestLostStreamHandleReused: a stream destroyed (without Forget) while an item waited on it,
// its work still queued, is found lost by a Reclaim whose Recover a capture on another stream
// puts off; the driver then gives the destroyed stream's handle to a new stream, which is
// idle. The item waits for the old stream's work, which only a synchronize of the context
// covers: a later poll (or Drain) of the handle asks the new stream, and must not hand the
// item back while the old stream's work is queued, nor may Idle of the list (pinned's cached
// frees go back on it) say the stream idle. Before, a poll found the new stream idle (a Drain
// synchronized it) and handed the item back; Idle said idle.
func TestLostStreamHandleReused(t *testing.T) {
	for _, second := range []string{"poll", "drain"} {
		testLostStreamHandleReused(t, second)
	}
}

// testLostStreamHandleReused is TestLostStreamHandleReused with second, what asks the handle
// after its reuse: "poll" (a Reclaim) or "drain" (a Drain).
func testLostStreamHandleReused(t *testing.T, second string) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ls, c, a := lostDuringCapture(t, f, dev)
	b, err := dev.StreamCreate(true)
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
	if b != a {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", b, a)
	}
	if idle, err := ls.Idle(ls.Lookup(a)); idle && f.Pending() > 0 {
		t.Fatalf("Idle of the lost list after the handle's reuse = %v, %v, with the destroyed "+
			"stream's work still queued", idle, err)
	}
	var done []int
	if second == "drain" {
		done, _ = ls.Drain(nil)
	} else {
		done, _ = ls.Reclaim(nil, nil)
	}
	if len(done) != 0 && f.Pending() > 0 {
		t.Fatalf("%s after the handle's reuse gave back %v, with the destroyed stream's work "+
			"still queued", second, done)
	}
	endCapture(t, dev, c)
	f.Hold(false)
	if done, err := ls.Reclaim(done, nil); err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("reclaim after the capture: %v back, error %v; want [1]", done, err)
	}
	if got := ls.RefusedLost(nil); len(got) != 0 {
		t.Fatalf("RefusedLost after Recover answered = %#x; want none", got)
	}
	if ls.Refused(a) {
		t.Fatal("Refused after Recover answered = true; want false")
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestForgetReusedHandleOfLostStream: as TestLostStreamHandleReused, and then the user forgets
// the new stream (Forget, a synchronize of the handle, Release), on whose list a late free of
// the destroyed stream's and an item of the new stream's were pushed: the synchronize covers
// the new stream's work, not the destroyed one's, and the lists cannot tell the two streams'
// items apart, so Release keeps them all for Recover. Before, Release handed them all back with
// the destroyed stream's work still queued.
func TestForgetReusedHandleOfLostStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ls, c, a := lostDuringCapture(t, f, dev)
	b, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	if b != a {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", b, a)
	}
	l, err := ls.Check(b)
	if err != nil {
		t.Fatal(err)
	}
	ls.Push(l, 3) // a late free of the destroyed stream's: its memset is still queued
	ls.Push(l, 2) // the new stream's item: no work of its own
	l = ls.Forget(b)
	if l == nil {
		t.Fatal("Forget of the new stream found no list")
	}
	if err := dev.StreamSynchronize(b); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamDestroy(b); err != nil {
		t.Fatal(err)
	}
	done := ls.Release(l, nil)
	if (slices.Contains(done, 1) || slices.Contains(done, 3)) && f.Pending() > 0 {
		t.Fatalf("Release after the forgotten new stream's synchronize gave back %v, with the "+
			"destroyed stream's work still queued", done)
	}
	if len(done) != 0 {
		t.Fatalf("Release gave back %v, want nothing: the lists cannot tell the new stream's "+
			"items from the destroyed one's", done)
	}
	endCapture(t, dev, c)
	f.Hold(false)
	if done, err := ls.Reclaim(nil, nil); err != nil || !slices.Equal(done, []int{1, 3, 2}) {
		t.Fatalf("reclaim after the capture: %v back, error %v; want [1 3 2]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveredListAsksNewStreamOrder: a non-blocking stream's list (its order asked once, by
// Idle) is lost on a refusal of the destroyed stream's handle, and keeps a late free of the
// destroyed stream's past Recover; the driver gave the handle to a blocking stream meanwhile.
// Recover has answered the destroyed stream (the handle's answers count again), but the
// list's answer to "non-blocking?" was the destroyed stream's: a free on the new stream after
// the legacy stream's work must wait for that work too. Before, the list kept the old answer,
// a poll asked the new stream alone and handed the items back with the legacy stream's memset
// still queued.
func TestRecoveredListAsksNewStreamOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 2)
	c := ss[0] // the stream a user captures
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	if _, err := ls.Check(c); err != nil {
		t.Fatal(err)
	}
	a, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	if idle, err := ls.Idle(ls.Get(a)); err != nil || !idle { // asks whether a is non-blocking
		t.Fatalf("Idle of the new non-blocking stream = %v, %v", idle, err)
	}
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[1], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(a), 1)
	if err := dev.StreamDestroy(a); err != nil { // its work still queued, as on a GPU
		t.Fatal(err)
	}
	beginCapture(t, dev, c)
	if done, err := ls.Reclaim(nil, nil); err == nil || len(done) != 0 || ls.Lost() != 1 {
		t.Fatalf("reclaim of the destroyed stream during a capture: %v back, error %v, %d lost; "+
			"want nothing back, an error, 1 lost", done, err, ls.Lost())
	}
	ls.Push(ls.Get(a), 3) // a late free of the destroyed stream's
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
	if b != a {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", b, a)
	}
	endCapture(t, dev, c)
	// Recover alone, not Reclaim: a poll now would count the late free for it too.
	if done, err := ls.Recover(nil, nil); err != nil || !slices.Equal(done, []int{1}) {
		t.Fatalf("recover after the capture: %v back, error %v; want [1]", done, err)
	}
	if err := dev.MemsetD8Async(bufs[0], 2, 4096, 0); err != nil { // the legacy stream's work
		t.Fatal(err)
	}
	ls.Push(ls.Get(b), 2) // a free on the blocking stream, after the legacy stream's memset
	if done, err := ls.Poll(nil); len(done) != 0 && f.Pending() > 0 {
		t.Fatalf("poll of the new blocking stream gave back %v (error %v), with the legacy "+
			"stream's memset still queued", done, err)
	}
	f.Hold(false)
	if done, err := ls.Drain(nil); err != nil || !slices.Equal(done, []int{3, 2}) {
		t.Fatalf("drain: %v back, error %v; want [3 2]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// lostDuringCapture sets up what the tests of a lost stream whose handle is reused start from:
// lists with c, a stream a user captures (the capture begun), and a, a stream destroyed
// (without Forget) while an item (1) waited on it and its memset was held queued, which a
// Reclaim during the capture found lost.
func lostDuringCapture(t *testing.T, f *fakecuda.Driver, dev *cuda.Device) (*streamq.Lists[int], cuda.Stream, cuda.Stream) {
	t.Helper()
	ss, bufs, p, _ := testStreams(t, dev, 1)
	c := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	if _, err := ls.Check(c); err != nil {
		t.Fatal(err)
	}
	a, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(a), 1)
	if err := dev.StreamDestroy(a); err != nil { // its work still queued, as on a GPU
		t.Fatal(err)
	}
	beginCapture(t, dev, c)
	if done, err := ls.Reclaim(nil, nil); err == nil || len(done) != 0 || ls.Lost() != 1 {
		t.Fatalf("reclaim of the destroyed stream during a capture: %v back, error %v, %d lost; "+
			"want nothing back, an error, 1 lost", done, err, ls.Lost())
	}
	if got := ls.RefusedLost(nil); !slices.Equal(got, []streamq.Stream{a}) {
		t.Fatalf("RefusedLost after the loss = %#x; want the destroyed stream %#x", got, a)
	}
	if !ls.Refused(a) || ls.Refused(c) {
		t.Fatalf("Refused after the loss: %v for the destroyed stream, %v for the capturing one; want true, false", ls.Refused(a), ls.Refused(c))
	}
	return ls, c, a
}

// TestLoseRefusedKeepsList: a list its caller found refused on its handle (Lose, as
// pinned.Pool's ForgetStream does when it cannot synchronize the context instead), empty, is
// kept lost: Refused says so, polls neither ask the handle nor retire the list (an item recorded
// on the destroyed stream and pushed later waits with it, for Recover), and Recover answers it.
// A retired list left the handle with no state: the later push made a new list, whose poll
// asked the handle, which the driver may have given to a new stream.
func TestLoseRefusedKeepsList(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	l := ls.Get(s)
	ls.Lose(l, fmt.Errorf("wait for stream %#x: %w", s, pinmalloc.ErrInvalidHandle))
	if !ls.Refused(s) || ls.Lost() != 1 {
		t.Fatalf("after Lose: refused %v, %d lost; want true, 1", ls.Refused(s), ls.Lost())
	}
	for range 4 {
		if done, err := ls.Poll(nil); len(done) != 0 || err != nil {
			t.Fatalf("poll of the lost list: %v back, %v; want nothing", done, err)
		}
	}
	if ls.Lookup(s) != l {
		t.Fatal("polls retired the list lost on a refused handle before Recover")
	}
	ls.Push(ls.Get(s), 7)
	if done, _ := ls.Poll(nil); len(done) != 0 {
		t.Fatalf("a poll of the refused list asked the handle: %v back", done)
	}
	done, err := ls.Recover(nil, nil)
	if err != nil || ls.Refused(s) || ls.Lost() != 0 {
		t.Fatalf("Recover: %v, refused %v, %d lost; want nil, false, 0", err, ls.Refused(s), ls.Lost())
	}
	if done, err = ls.Poll(done); err != nil || len(done) != 1 || done[0] != 7 {
		t.Fatalf("after Recover: %v back, %v; want [7]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
