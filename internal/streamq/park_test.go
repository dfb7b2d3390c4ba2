package streamq_test

import (
	"runtime"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestParkKeepsItemsApart: a list parked (Park, after Forget) leaves the lists with its items, a
// marked one behind its point and an open one: its stream's handle has no list any more, a push
// through the parked list follows to a new list of the handle's own, and no poll or drain hands
// the parked items back, however idle the handle's stream; they still count in Weight, Items
// walks them, and Release hands them back (its point back to the pool: the points' Close checks).
func TestParkKeepsItemsApart(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	f.Hold(true)
	defer f.Hold(false)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
		t.Fatal(err)
	}
	l := ls.Get(s)
	ls.Push(l, 1)
	if done, err := ls.Poll(nil); err != nil || len(done) != 0 { // 1 gets a point, s busy
		t.Fatalf("poll: %v back, %v", done, err)
	}
	ls.Push(l, 2)
	if got := ls.Forget(s); got != l {
		t.Fatalf("Forget returned %p, want the list %p", got, l)
	}
	ls.Park(l)
	if ls.Lookup(s) != nil || ls.Streams() != 0 || !l.Left() || ls.Weight() != 2 {
		t.Fatalf("parked: list of s %v, %d streams, left %v, weight %d; want none, 0, true, 2", ls.Lookup(s) != nil, ls.Streams(), l.Left(), ls.Weight())
	}
	ls.Push(l, 3) // follows to the handle's new list
	if n := ls.Lookup(s); n == nil || n == l {
		t.Fatalf("a push through the parked list made no new list for s (%p)", n)
	}
	f.Complete() // s idle: a poll and a drain hand back what waits for s, and no parked item
	done, err := ls.Poll(nil)
	if err != nil {
		t.Fatal(err)
	}
	if done, err = ls.Drain(done); err != nil || !slices.Equal(done, []int{3}) {
		t.Fatalf("poll and drain with s idle: %v back, %v; want [3] (the parked items stay)", done, err)
	}
	var marked, open []int
	l.Items(func(m, o []int) { marked, open = slices.Clone(m), slices.Clone(o) })
	if !slices.Equal(marked, []int{1}) || !slices.Equal(open, []int{2}) || ls.Weight() != 2 {
		t.Fatalf("parked items: marked %v, open %v, weight %d; want [1], [2], 2", marked, open, ls.Weight())
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
	if done := ls.Release(l, nil); !slices.Equal(done, []int{1, 2}) || ls.Weight() != 0 {
		t.Fatalf("Release of the parked list: %v, weight %d; want [1 2], 0", done, ls.Weight())
	}
}

// TestParkForgetsLoss: a list a poll found lost (its stream's record refused), then parked, is
// no longer Recover's: its items stay with it for the caller's Release.
func TestParkForgetsLoss(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists[int](p, nil, 2)
	f.Hold(true)
	defer f.Hold(false)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil { // s busy: the poll records
		t.Fatal(err)
	}
	l := ls.Get(s)
	ls.Push(l, 1)
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	if _, err := ls.Poll(nil); err == nil || ls.Lost() != 1 {
		t.Fatalf("poll with the record refused: %v, %d lost; want an error, 1 lost", err, ls.Lost())
	}
	ls.Forget(s)
	ls.Park(l)
	if ls.Lost() != 0 {
		t.Fatalf("%d lists lost after the lost list was parked; want 0", ls.Lost())
	}
	if done, err := ls.Recover(nil, nil); err != nil || len(done) != 0 {
		t.Fatalf("Recover: %v, %v; want nothing (the parked list is the caller's)", done, err)
	}
	if done := ls.Release(l, nil); !slices.Equal(done, []int{1}) {
		t.Fatalf("Release: %v; want [1]", done)
	}
}

// TestSyncedSince: SyncedSince(mark) is false until a synchronize of the context (WaitAll)
// that started after SyncMark returned mark has succeeded (one the driver refuses, during a
// capture, does not count), and true from then on.
func TestSyncedSince(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 1)
	before := p.SyncMark()
	runtime.LockOSThread()
	if err := dev.StreamBeginCapture(ss[0], cuda.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
	err := p.WaitAll()
	if _, cerr := dev.StreamEndCapture(ss[0]); cerr == nil {
		t.Error("the synchronize of the context left the capture valid: the test refuses nothing")
	}
	runtime.UnlockOSThread()
	if err == nil || p.SyncedSince(before) {
		t.Fatalf("a synchronize of the context during a capture: %v, SyncedSince %v; want an error, false", err, p.SyncedSince(before))
	}
	if err := p.WaitAll(); err != nil {
		t.Fatal(err)
	}
	mark := p.SyncMark()
	if !p.SyncedSince(before) || p.SyncedSince(mark) {
		t.Fatalf("SyncedSince: %v for a mark before the synchronize, %v for one after; want true, false", p.SyncedSince(before), p.SyncedSince(mark))
	}
	if err := p.WaitAll(); err != nil {
		t.Fatal(err)
	}
	if !p.SyncedSince(mark) {
		t.Fatal("SyncedSince: false after a later synchronize succeeded")
	}
}

// TestParkItems: a list made parked (ParkItems) for a stream with a list of its own keeps its
// items apart as a parked one does: the stream's list is untouched, a poll and a drain hand
// nothing of it back, Weight, Totals and Verify count it, and Release hands its items back and
// ends its parking.
func TestParkItems(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	own := ls.Get(s)
	l := ls.ParkItems(s, []int{7, 8})
	if ls.Lookup(s) != own || !l.Left() || ls.Weight() != 2 || ls.Totals().Items != 2 {
		t.Fatalf("ParkItems: s's own list kept %v, left %v, weight %d, totals %+v; want true, true, 2, 2 items",
			ls.Lookup(s) == own, l.Left(), ls.Weight(), ls.Totals())
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
	done, err := ls.Poll(nil)
	if err == nil {
		done, err = ls.Drain(done)
	}
	if err != nil || len(done) != 0 {
		t.Fatalf("poll and drain: %v back, %v; want nothing (the items are parked)", done, err)
	}
	if done = ls.Release(l, nil); !slices.Equal(done, []int{7, 8}) || ls.Weight() != 0 || ls.Totals().Items != 0 {
		t.Fatalf("Release: %v back, weight %d, totals %+v; want [7 8], 0, none", done, ls.Weight(), ls.Totals())
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
