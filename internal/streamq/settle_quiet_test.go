package streamq_test

import (
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestSettleAfterPollOfLegacyItems: a poll made after the caller's last wait gives the legacy
// default stream's items a point there, which the fake's held queries leave in flight (a GPU
// that has not reached it yet). Settle then hands everything back at once: that point is the
// lists' own, recorded when the legacy stream's own work had all run, and waits for nothing
// the caller has in flight. Before, Settle found the legacy stream running (its own point),
// and a device heap's Close said ErrBusy. It still says running, and leaves the work queued,
// for the caller's work on the legacy stream queued before or after the poll's point, or on a
// blocking stream of the lists (whose work that point waits for). And a poll asks the
// blocking streams before it records a point in the legacy stream: before, in the map's order,
// a blocking stream asked after it found it in flight and got a point of its own, idle.
func TestSettleAfterPollOfLegacyItems(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, events := testStreams(t, dev, 1)
	a := ss[0] // non-blocking
	bs := []streamq.Stream{blockingStream(t, dev), blockingStream(t, dev), blockingStream(t, dev), blockingStream(t, dev)}
	ls := streamq.NewLists[int](p, nil, 1000) // lists kept: no stream is checked again below
	for _, s := range append([]streamq.Stream{0, a}, bs...) {
		if _, err := ls.Check(s); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dev.Synchronize()) // the checks' points, run
	f.Hold(true)
	defer f.Hold(false)
	push := func(s streamq.Stream, v int) {
		t.Helper()
		l, err := ls.Check(s)
		must(err)
		ls.Push(l, v)
	}
	memset := func(s streamq.Stream) {
		t.Helper()
		must(dev.MemsetD8Async(bufs[0], 1, 4096, s))
	}
	poll := func(what string, want []int) {
		t.Helper()
		got, err := ls.Poll(nil)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: Poll gave %v, %v; want %v", what, got, err, want)
		}
	}
	const none = ^streamq.Stream(0)
	settle := func(what string, want []int, wantRunning streamq.Stream) {
		t.Helper()
		// The legacy stream named first, as a caller's own (a heap of it): asked first before,
		// it was found running first, and Settle then waited for the point behind a blocking
		// stream's work.
		got, s, running, err := ls.Settle(nil, []streamq.Stream{0})
		slices.Sort(got)
		if err != nil || running != (wantRunning != none) || running && s != wantRunning || !slices.Equal(got, want) {
			t.Fatalf("%s: Settle gave %v, running %v (stream %#x), %v; want %v, running stream %#x", what, got, running, s, err, want, wantRunning)
		}
	}

	// Every stream idle: the blocking streams' items come back at the poll, whatever the map's
	// order (several rounds), the legacy stream's at the next, after the caller's wait.
	for round := range 8 {
		push(0, 1)
		push(a, 2)
		for i, b := range bs {
			push(b, 10+i)
		}
		want := []int{1, 2, 10, 11, 12, 13} // 1: the last round's, whose point has run
		if round == 0 {
			want = want[1:]
		}
		poll("every stream idle", want)
		if round < 7 {
			must(dev.Synchronize()) // the caller's wait, after the poll
		}
	}
	// The last round's point is in flight, with nothing of the caller's.
	settle("after a poll's point in the legacy stream", []int{1}, none)
	if n := f.Pending(); n != 0 {
		t.Fatalf("%d streams have work pending after Settle", n)
	}

	// The caller's work in flight: running, and it stays queued.
	for _, c := range []struct {
		what   string
		before bool // queued before the poll's point
		work   streamq.Stream
		pushB  bool  // an item on bs[0] too, 4
		polled []int // what the poll hands back
		now    []int // what the Reclaim of a running Settle hands back
		after  []int // what Settle hands back once the work has run
	}{
		{"work on the legacy stream before the poll's point", true, 0, false, nil, nil, []int{3}},
		{"work on the legacy stream after the poll's point", false, 0, true, []int{4}, []int{3}, nil},
		{"work on a blocking stream of the lists before the poll's point", true, bs[0], true, nil, nil, []int{3, 4}},
	} {
		push(0, 3)
		if c.pushB {
			push(bs[0], 4)
		}
		if c.before {
			memset(c.work)
		}
		poll(c.what, c.polled)
		if !c.before {
			memset(c.work)
		}
		settle(c.what, c.now, c.work)
		if f.Pending() == 0 {
			t.Fatalf("%s: Settle ran the work (it waited for it)", c.what)
		}
		must(dev.Synchronize())
		settle(c.what+", then run", c.after, none)
	}
	if n := events.Created() - events.Destroyed() - int64(events.Idle()); n != 0 {
		t.Errorf("%d events not back in the pool", n)
	}
}

// TestSettleAfterPollBehindLegacyPoint: a poll that finds a blocking stream's own work all run
// but the legacy stream busy with the point an earlier poll recorded there (in flight: the
// fake's queries held) gives the blocking stream's items a point of its own, behind that one.
// With nothing of the caller's in flight, Settle hands everything back: it waits for the
// legacy stream's point, then for the blocking stream's. Before, it said the blocking stream
// was running. It still says so, and leaves the work queued, for the caller's work on the
// blocking stream queued after its point (it waits for both points, not the work), or before
// a point in the legacy stream recorded after the blocking stream's (which that point waits
// for: it waits for neither).
func TestSettleAfterPollBehindLegacyPoint(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	_, bufs, p, events := testStreams(t, dev, 1)
	b := blockingStream(t, dev)
	ls := streamq.NewLists[int](p, nil, 1000)
	for _, s := range []streamq.Stream{0, b} {
		if _, err := ls.Check(s); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dev.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	push := func(s streamq.Stream, v int) {
		t.Helper()
		l, err := ls.Check(s)
		must(err)
		ls.Push(l, v)
	}
	poll := func(what string, want []int) {
		t.Helper()
		got, err := ls.Poll(nil)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: Poll gave %v, %v; want %v", what, got, err, want)
		}
	}
	const none = ^streamq.Stream(0)
	settle := func(what string, want []int, wantRunning streamq.Stream) {
		t.Helper()
		got, s, running, err := ls.Settle(nil, nil)
		slices.Sort(got)
		if err != nil || running != (wantRunning != none) || running && s != wantRunning || !slices.Equal(got, want) {
			t.Fatalf("%s: Settle gave %v, running %v (stream %#x), %v; want %v, running stream %#x", what, got, running, s, err, want, wantRunning)
		}
	}
	// behind makes the lists' points: the legacy stream's (1), then b's behind it (2).
	behind := func(what string) {
		t.Helper()
		push(0, 1)
		poll(what, nil)
		push(b, 2)
		poll(what+", then b's", nil)
	}

	behind("nothing in flight")
	settle("nothing in flight", []int{1, 2}, none)
	if n := f.Pending(); n != 0 {
		t.Fatalf("%d streams have work pending after Settle", n)
	}

	behind("work on b after its point")
	must(dev.MemsetD8Async(bufs[0], 1, 4096, b))
	settle("work on b after its point", []int{1, 2}, b) // both points waited for, by a poll then
	if f.Pending() == 0 {
		t.Fatal("work on b after its point: Settle ran the work (it waited for it)")
	}
	must(dev.Synchronize())
	settle("work on b after its point, then run", nil, none)

	// b's point (2), the caller's work on b, then a point in the legacy stream (3), which
	// waits for that work.
	behind("work on b before a later legacy point")
	must(dev.MemsetD8Async(bufs[0], 1, 4096, b))
	f.CompleteStream(0) // the legacy stream's first point passed, not b's
	push(0, 3)
	poll("work on b before a later legacy point, then the legacy stream's", []int{1})
	settle("work on b before a later legacy point", nil, b)
	if f.Pending() == 0 {
		t.Fatal("work on b before a later legacy point: Settle ran the work (it waited for it)")
	}
	must(dev.Synchronize())
	settle("work on b before a later legacy point, then run", []int{2, 3}, none)
	if n := events.Created() - events.Destroyed() - int64(events.Idle()); n != 0 {
		t.Errorf("%d events not back in the pool", n)
	}
}
