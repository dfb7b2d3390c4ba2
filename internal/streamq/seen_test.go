package streamq_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestListsCheck: the one check of a stream new to a user (pinned.Pool, device.Heap and
// uvm.Tier all call it): the per-thread default stream refused with ErrPerThreadStream, a
// handle the driver does not know and a stream of another device refused with the driver's
// error, a stream of the device accepted once with the driver (a point recorded in it) and
// from then on with none, until it is forgotten or its list leaves.
func TestListsCheck(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	ss, _, p, events := testStreams(t, dev, 2)
	dev1 := f.Open(t, 1)
	s1, err := dev1.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev1.StreamDestroy(s1)
	ls := streamq.NewLists[int](p, nil, 1)
	if _, err := ls.Check(streamq.PerThreadStream); !errors.Is(err, streamq.ErrPerThreadStream) {
		t.Errorf("Check of the per-thread default stream: %v, want ErrPerThreadStream", err)
	}
	for _, s := range []streamq.Stream{0xdead, s1} {
		if _, err := ls.Check(s); err == nil {
			t.Errorf("Check of %#x (not a stream of device 0) accepted", s)
		}
	}
	if ls.Checks() != 2 || ls.Streams() != 0 {
		t.Fatalf("after three refusals: %d driver checks (want 2: the per-thread stream is refused first), %d streams (want 0)", ls.Checks(), ls.Streams())
	}
	records := f.Stat(fakecuda.EventRecords)
	for range 3 {
		for _, s := range append(ss, 0) { // the legacy stream too
			l, err := ls.Check(s)
			if err != nil || l.Stream() != s {
				t.Fatalf("Check of stream %#x: %v, %v", s, l, err)
			}
		}
	}
	if n := f.Stat(fakecuda.EventRecords) - records; n != 2 || ls.Checks() != 4 {
		t.Errorf("three streams checked nine times: %d points recorded, %d driver checks; want 2 and 4 (the legacy stream, every context's, is not asked about)", n, ls.Checks())
	}
	if l := ls.Forget(ss[0]); l == nil {
		t.Fatal("Forget of a stream checked: no list")
	} else {
		ls.Release(l, nil)
	}
	if _, err := ls.Check(ss[0]); err != nil || ls.Checks() != 5 {
		t.Errorf("Check of a stream forgotten: %v, %d driver checks; want one more (5)", err, ls.Checks())
	}
	if events.Idle() != int(events.Created()) {
		t.Errorf("%d events idle of %d created: a check kept one", events.Idle(), events.Created())
	}
}

// TestListsForgotten: a stream forgotten (Forget) is Forgotten once its list has gone, and no
// longer once a list is made for it again (a new stream may have its handle: what is recorded
// on it then must wait for it); Prune takes the lists with no items out, and only those.
func TestListsForgotten(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 3)
	ls := streamq.NewLists[int](p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	if ls.Forgotten(ss[0]) {
		t.Fatal("a stream never seen is forgotten")
	}
	l, err := ls.Check(ss[0])
	if err != nil {
		t.Fatal(err)
	}
	ls.Push(l, 1)
	l = ls.Forget(ss[0])
	if ls.Forgotten(ss[0]) {
		t.Fatal("forgotten while its list still holds an item")
	}
	if done := ls.Release(l, nil); len(done) != 1 {
		t.Fatalf("Release handed back %v, want the one item", done)
	}
	if !ls.Forgotten(ss[0]) || ls.Forgotten(ss[1]) {
		t.Fatalf("forgotten: %v (want true), another stream %v (want false)", ls.Forgotten(ss[0]), ls.Forgotten(ss[1]))
	}
	if _, err := ls.Check(ss[0]); err != nil || ls.Forgotten(ss[0]) {
		t.Fatalf("a forgotten stream checked again: %v; still forgotten %v", err, ls.Forgotten(ss[0]))
	}
	// Prune: an empty list leaves (checked again next time), one with items stays.
	for _, s := range ss[1:] {
		if _, err := ls.Check(s); err != nil {
			t.Fatal(err)
		}
	}
	l2, _ := ls.Check(ss[2])
	ls.Push(l2, 2)
	ls.Prune()
	if ls.Streams() != 1 || ls.Lookup(ss[2]) == nil {
		t.Fatalf("after Prune: %d streams, want the one with an item", ls.Streams())
	}
	if seen := slices.Collect(ls.Seen); !slices.Contains(seen, ss[1]) {
		t.Errorf("after Prune, streams seen %#x: want the pruned %#x among them (Captured asks them)", seen, ss[1])
	}
	checks := ls.Checks()
	if _, err := ls.Check(ss[1]); err != nil || ls.Checks() != checks+1 {
		t.Errorf("a pruned stream is checked again: %v, %d checks (want %d)", err, ls.Checks(), checks+1)
	}
	if done := ls.Release(ls.Forget(ss[2]), nil); len(done) != 1 {
		t.Fatalf("Release handed back %v", done)
	}
}

// TestRunningKeepsLegacyOrder: Running finds a stream with work queued, and the legacy default
// stream's work when a stream given is blocking (it is ordered before theirs), not when all are
// non-blocking; WaitLegacyOrder runs the legacy stream's work, or the context's.
func TestRunningKeepsLegacyOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	b := blockingStream(t, dev)
	f.Hold(true)
	defer f.Complete()
	running := func(what string, given []streamq.Stream, want streamq.Stream, wantRunning bool) {
		t.Helper()
		s, r, err := p.Running(given)
		if err != nil || r != wantRunning || r && s != want {
			t.Fatalf("Running of %s: %#x, %v, %v; want %#x, %v", what, s, r, err, want, wantRunning)
		}
	}
	running("idle streams", []streamq.Stream{ss[0], b}, 0, false)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, ss[0]); err != nil {
		t.Fatal(err)
	}
	running("a busy non-blocking stream", []streamq.Stream{b, ss[0]}, ss[0], true)
	f.CompleteStream(ss[0])
	if err := dev.MemsetD8Async(bufs[0], 2, 4096, 0); err != nil { // on the legacy stream
		t.Fatal(err)
	}
	running("a non-blocking stream, the legacy stream busy", []streamq.Stream{ss[0]}, 0, false)
	running("a blocking stream, the legacy stream busy", []streamq.Stream{ss[0], b}, 0, true)
	if err := p.WaitLegacyOrder(false); err != nil {
		t.Fatal(err)
	}
	running("a blocking stream after WaitLegacyOrder", []streamq.Stream{b}, 0, false)
	if err := dev.MemsetD8Async(bufs[0], 3, 4096, b); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitLegacyOrder(true); err != nil { // the context: b's work too
		t.Fatal(err)
	}
	running("every stream after WaitLegacyOrder(true)", []streamq.Stream{ss[0], b}, 0, false)
}

// TestPushKnownAfterForget: a push onto a list found before its stream was forgotten (Forget,
// then Release, which takes the list out): PushKnown and PushManyKnown push nothing, report
// false, make no list, and the stream stays forgotten; Push makes a list for the forgotten
// handle, and the stream stops counting as forgotten. A list that left for want of items (two
// polls found it empty), its stream not forgotten, is followed to the stream's new list, as
// Push does; and so is a forgotten stream's once a list is made for it again.
func TestPushKnownAfterForget(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, _, p, _ := testStreams(t, dev, 2)
	ls := streamq.NewLists[int](p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	l, err := ls.Check(ss[0])
	if err != nil {
		t.Fatal(err)
	}
	if l.Left() {
		t.Fatal("a list in the lists has left")
	}
	ls.Release(ls.Forget(ss[0]), nil)
	if !l.Left() {
		t.Fatal("a list Release took out has not left")
	}
	if ls.PushKnown(l, 1) || ls.PushManyKnown(l, []int{2, 3}) {
		t.Fatal("a push onto a forgotten stream's list was taken")
	}
	if ls.Streams() != 0 || ls.Weight() != 0 || !ls.Forgotten(ss[0]) {
		t.Fatalf("after the refused pushes: %d streams, weight %d, forgotten %v; want 0, 0, true", ls.Streams(), ls.Weight(), ls.Forgotten(ss[0]))
	}
	ls.Push(l, 4) // Push follows it to a new list
	if ls.Streams() != 1 || ls.Forgotten(ss[0]) {
		t.Fatalf("after Push: %d streams, forgotten %v; want 1, false", ls.Streams(), ls.Forgotten(ss[0]))
	}
	if !ls.PushKnown(l, 5) { // a list made for the stream since: followed
		t.Fatal("a push onto the list of a stream with a new list was refused")
	}
	if done := ls.Release(ls.Forget(ss[0]), nil); len(done) != 2 {
		t.Fatalf("Release handed back %v, want [4 5]", done)
	}
	// A list that left for want of items, its stream known: followed.
	l, err = ls.Check(ss[1])
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ls.Poll(nil); err != nil {
			t.Fatal(err)
		}
	}
	if !l.Left() || ls.Streams() != 0 {
		t.Fatalf("after two polls of an empty list: left %v, %d streams; want true, 0", l.Left(), ls.Streams())
	}
	if !ls.PushManyKnown(l, []int{6, 7}) || ls.Streams() != 1 || ls.Weight() != 2 {
		t.Fatalf("a push onto a retired list of a known stream: %d streams, weight %d; want 1, 2", ls.Streams(), ls.Weight())
	}
	if done, err := ls.Poll(nil); err != nil || len(done) != 2 {
		t.Fatalf("poll of an idle stream: %v, %v; want [6 7]", done, err)
	}
}
