package streamq_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestSettle: Settle hands back every item when no stream that may use them has work in
// flight, with the fake's queries held throughout (a device that has not reached a point
// recorded a moment ago). Items on the legacy default stream need a point there, never found
// passed by a query at once; Settle records one and waits for it. It says which stream is
// running, and waits for nothing, while a stream of the lists, a stream the caller names or
// the legacy stream (a blocking stream seen) has work queued; it waits for a blocking stream
// it was never told of, whose work the legacy stream's point comes after, and not for a
// non-blocking one's. A Poll, instead, hands back the non-default stream's item but leaves the
// legacy stream's waiting on its point.
func TestSettle(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, events := testStreams(t, dev, 2)
	out := func() int64 { return events.Created() - events.Destroyed() - int64(events.Idle()) }
	a, x := ss[0], ss[1] // non-blocking; x is never told to Settle
	b, y := blockingStream(t, dev), blockingStream(t, dev)
	ls := streamq.NewLists[int](p, nil, 1)
	// push pushes v on s, then runs the point Check may have recorded in a stream new to the
	// lists (which would be in flight until then, with the queries held).
	push := func(s streamq.Stream, v int) {
		t.Helper()
		l, err := ls.Check(s)
		if err != nil {
			t.Fatal(err)
		}
		ls.Push(l, v)
		if err := dev.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	settle := func(what string, extra []streamq.Stream, want []int, wantRunning streamq.Stream) {
		t.Helper()
		got, s, running, err := ls.Settle(nil, extra)
		slices.Sort(got)
		if err != nil || running != (wantRunning != ^streamq.Stream(0)) || running && s != wantRunning || !slices.Equal(got, want) {
			t.Fatalf("%s: Settle gave %v, running %v (stream %#x), %v; want %v, running stream %#x", what, got, running, s, err, want, wantRunning)
		}
	}
	const none = ^streamq.Stream(0)
	memset := func(s streamq.Stream) {
		t.Helper()
		if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Nothing in flight: a Poll leaves the legacy stream's item waiting for its point.
	push(0, 1)
	push(a, 2)
	f.Hold(true)
	defer f.Hold(false)
	if got, err := ls.Poll(nil); err != nil || !slices.Equal(got, []int{2}) {
		t.Fatalf("Poll with every stream idle: %v, %v; want [2] (the legacy stream's item waits for its point)", got, err)
	}
	must(dev.Synchronize()) // the poll's point, run: as if recorded long ago
	push(0, 3)
	push(b, 4)
	settle("every stream idle", nil, []int{1, 3, 4}, none)
	if n := out(); n != 0 {
		t.Errorf("%d events not back in the pool", n)
	}

	// Work in flight on a stream with items, a stream the caller names, the legacy stream
	// with a blocking stream seen or items of its own: running, and the work stays queued.
	// The poll Settle then makes hands back what the streams have passed: the item on b, with
	// the work on y, which b is not ordered after.
	for _, c := range []struct {
		what       string
		item, work streamq.Stream
		extra      []streamq.Stream
		now        []int
	}{
		{"work on the items' blocking stream", b, b, nil, nil},
		{"work on a stream the caller names", b, y, []streamq.Stream{y}, []int{5}},
		{"work on the legacy stream, a blocking stream seen", b, 0, nil, nil},
		{"work on the legacy stream, its items", 0, 0, nil, nil},
	} {
		push(c.item, 5)
		memset(c.work)
		settle(c.what, c.extra, c.now, c.work)
		if f.Pending() == 0 {
			t.Fatalf("%s: Settle ran the work (it waited for it)", c.what)
		}
		must(dev.Synchronize())
		want := []int{5}
		if c.now != nil {
			want = nil
		}
		settle(c.what+", then run", c.extra, want, none)
	}

	// Work on a blocking stream Settle was not told of: the legacy stream's point waits for it.
	push(0, 6)
	memset(y)
	settle("work on an unseen blocking stream", nil, []int{6}, none)
	if err := dev.StreamQuery(y); err != nil {
		t.Errorf("the unseen blocking stream's work did not run before the legacy stream's items came back: %v", err)
	}
	// Work on a non-blocking stream it was not told of: not waited for.
	push(0, 7)
	memset(x)
	settle("work on an unseen non-blocking stream", nil, []int{7}, none)
	if err := dev.StreamQuery(x); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("Settle waited for a non-blocking stream's work: query %v", err)
	}
	f.Complete()
}
