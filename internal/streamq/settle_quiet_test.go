package streamq_test

import (
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// quietRig is lists over streams checked and run before the fake's queries are held, for
// the tests of the points polls record after the caller's last wait.
type quietRig struct {
	t      *testing.T
	f      *fakecuda.Driver
	dev    *cuda.Device
	ls     *streamq.Lists[int]
	buf    cuda.DevicePtr // for the caller's work
	events *cuda.EventPool
}

// noStream is the running stream the rig's settle wants for none running.
const noStream = ^streamq.Stream(0)

// newQuietRig makes lists over the legacy stream, a non-blocking stream a and blocking
// streams bs (checked, their lists kept), runs the checks' points and holds the fake's
// queries until the test ends; nil without the fake (the parent process).
func newQuietRig(t *testing.T, blocking int) (r *quietRig, a streamq.Stream, bs []streamq.Stream) {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil, 0, nil
	}
	ss, bufs, p, events := testStreams(t, dev, 1)
	a = ss[0] // non-blocking
	for range blocking {
		bs = append(bs, blockingStream(t, dev))
	}
	r = &quietRig{t: t, f: f, dev: dev, ls: streamq.NewLists[int](p, nil, 1000), buf: bufs[0], events: events}
	for _, s := range append([]streamq.Stream{0, a}, bs...) {
		_, err := r.ls.Check(s)
		r.must(err)
	}
	r.must(dev.Synchronize()) // the checks' points, run
	f.Hold(true)
	t.Cleanup(func() { f.Hold(false) })
	return r, a, bs
}

func (r *quietRig) must(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// push pushes v on s, with no driver call (every stream was checked).
func (r *quietRig) push(s streamq.Stream, v int) {
	r.t.Helper()
	l, err := r.ls.Check(s)
	r.must(err)
	r.ls.Push(l, v)
}

// memset queues the caller's work on s.
func (r *quietRig) memset(s streamq.Stream) {
	r.t.Helper()
	r.must(r.dev.MemsetD8Async(r.buf, 1, 4096, s))
}

// poll polls the lists, wanting the items want back.
func (r *quietRig) poll(what string, want []int) {
	r.t.Helper()
	got, err := r.ls.Poll(nil)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, want) {
		r.t.Fatalf("%s: Poll gave %v, %v; want %v", what, got, err, want)
	}
}

// settle settles the lists with ss, wanting the items want back and wantRunning running
// (noStream: none).
func (r *quietRig) settle(what string, ss []streamq.Stream, want []int, wantRunning streamq.Stream) {
	r.t.Helper()
	got, s, running, err := r.ls.Settle(nil, ss)
	slices.Sort(got)
	if err != nil || running != (wantRunning != noStream) || running && s != wantRunning || !slices.Equal(got, want) {
		r.t.Fatalf("%s: Settle gave %v, running %v (stream %#x), %v; want %v, running stream %#x", what, got, running, s, err, want, wantRunning)
	}
}

// pending fails the test unless the caller's work is still queued (Settle did not wait for it).
func (r *quietRig) pending(what string) {
	r.t.Helper()
	if r.f.Pending() == 0 {
		r.t.Fatalf("%s: Settle ran the work (it waited for it)", what)
	}
}

// eventsBack checks that every event of the lists is back in the pool.
func (r *quietRig) eventsBack() {
	r.t.Helper()
	if n := r.events.Created() - r.events.Destroyed() - int64(r.events.Idle()); n != 0 {
		r.t.Errorf("%d events not back in the pool", n)
	}
}

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
	r, a, bs := newQuietRig(t, 4)
	if r == nil {
		return
	}
	// The legacy stream named first, as a caller's own (a heap of it): asked first before, it
	// was found running first, and Settle then waited for a point behind a blocking stream's
	// work.
	ss := []streamq.Stream{0}

	// Every stream idle: the blocking streams' items come back at the poll, whatever the map's
	// order (several rounds), the legacy stream's at the next, after the caller's wait.
	for round := range 8 {
		r.push(0, 1)
		r.push(a, 2)
		for i, b := range bs {
			r.push(b, 10+i)
		}
		want := []int{1, 2, 10, 11, 12, 13} // 1: the last round's, whose point has run
		if round == 0 {
			want = want[1:]
		}
		r.poll("every stream idle", want)
		if round < 7 {
			r.must(r.dev.Synchronize()) // the caller's wait, after the poll
		}
	}
	// The last round's point is in flight, with nothing of the caller's.
	r.settle("after a poll's point in the legacy stream", ss, []int{1}, noStream)
	if n := r.f.Pending(); n != 0 {
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
		r.push(0, 3)
		if c.pushB {
			r.push(bs[0], 4)
		}
		if c.before {
			r.memset(c.work)
		}
		r.poll(c.what, c.polled)
		if !c.before {
			r.memset(c.work)
		}
		r.settle(c.what, ss, c.now, c.work)
		r.pending(c.what)
		r.must(r.dev.Synchronize())
		r.settle(c.what+", then run", ss, c.after, noStream)
	}
	r.eventsBack()
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
	r, _, bs := newQuietRig(t, 1)
	if r == nil {
		return
	}
	b := bs[0]
	// behind makes the lists' points: the legacy stream's (item 1), then b's behind it (2).
	behind := func(what string) {
		t.Helper()
		r.push(0, 1)
		r.poll(what, nil)
		r.push(b, 2)
		r.poll(what+", then b's", nil)
	}

	behind("nothing in flight")
	r.settle("nothing in flight", nil, []int{1, 2}, noStream)
	if n := r.f.Pending(); n != 0 {
		t.Fatalf("%d streams have work pending after Settle", n)
	}

	behind("work on b after its point")
	r.memset(b)
	r.settle("work on b after its point", nil, []int{1, 2}, b) // both points waited for, by a poll then
	r.pending("work on b after its point")
	r.must(r.dev.Synchronize())
	r.settle("work on b after its point, then run", nil, nil, noStream)

	// b's point (2), the caller's work on b, then a point in the legacy stream (3), which
	// waits for that work.
	behind("work on b before a later legacy point")
	r.memset(b)
	r.f.CompleteStream(0) // the legacy stream's first point passed, not b's
	r.push(0, 3)
	r.poll("work on b before a later legacy point, then the legacy stream's", []int{1})
	r.settle("work on b before a later legacy point", nil, nil, b)
	r.pending("work on b before a later legacy point")
	r.must(r.dev.Synchronize())
	r.settle("work on b before a later legacy point, then run", nil, []int{2, 3}, noStream)
	r.eventsBack()
}
