package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestIdleKeepsLegacyOrder: a point in a blocking stream comes after the legacy default
// stream's earlier work, and one in the legacy stream after every blocking stream's (the
// legacy stream's implicit synchronization), so Idle, a point now, must not find a blocking
// stream with nothing of its own queued idle while the legacy stream has work pending, nor
// ever the legacy stream (or the per-thread default stream): their points wait for blocking
// streams no query sees. A point recorded instead (Mark) is passed only once that work ran;
// once everything ran, the blocking stream is idle. Before the fix Idle asked cuStreamQuery of
// the stream alone, which found both idle.
func TestIdleKeepsLegacyOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	b := blockingStream(t, dev)
	f.Hold(true)
	defer f.Complete()
	idle := func(what string, s streamq.Stream, want bool) {
		t.Helper()
		got, err := p.Idle(s, false)
		if err != nil || got != want {
			t.Fatalf("Idle of %s: %v, %v; want %v", what, got, err, want)
		}
	}
	// Work on the legacy stream: a blocking stream's points come after it.
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, 0); err != nil {
		t.Fatal(err)
	}
	idle("a blocking stream, the legacy stream busy", b, false)
	ev, err := p.Mark(b)
	if err != nil {
		t.Fatal(err)
	}
	if passed, err := p.Passed(ev); err != nil || passed {
		p.Put(ev)
		t.Fatalf("a point in a blocking stream with the legacy stream's work pending: passed %v, %v", passed, err)
	}
	f.CompleteStream(b) // runs the legacy stream's work first, the point's dependency
	if passed, err := p.Passed(ev); err != nil || !passed {
		t.Fatalf("a point in a blocking stream after it ran: passed %v, %v", passed, err)
	}
	p.Put(ev)
	idle("a blocking stream, the legacy stream idle", b, true)
	// Work on a blocking stream: the legacy stream's points come after it.
	if err := dev.MemsetD8Async(bufs[0], 2, 4096, b); err != nil {
		t.Fatal(err)
	}
	idle("the legacy stream, a blocking stream busy", 0, false)
	idle("the per-thread default stream, a blocking stream busy", 2, false)
	f.CompleteStream(b)
	idle("the legacy stream, every stream idle", 0, false) // never: a Mark says it
	idle("a non-blocking stream, every stream idle", ss[0], true)

	// Lists.Idle asks once whether a list's stream is non-blocking: a non-blocking stream is
	// idle with the legacy stream busy, in one query; a blocking one is not, in two.
	ls := streamq.NewLists[int](p, nil, 1)
	if err := dev.MemsetD8Async(bufs[0], 3, 4096, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what    string
		s       streamq.Stream
		want    bool
		queries int64
	}{{"non-blocking", ss[0], true, 1}, {"blocking", b, false, 2}} {
		l := ls.Get(c.s)
		for range 2 {
			q := f.Stat(fakecuda.StreamQueries)
			if got, err := ls.Idle(l); err != nil || got != c.want {
				t.Fatalf("Lists.Idle of a %s stream, the legacy stream busy: %v, %v; want %v", c.what, got, err, c.want)
			}
			if n := f.Stat(fakecuda.StreamQueries) - q; n != c.queries {
				t.Errorf("Lists.Idle of a %s stream made %d stream queries, want %d", c.what, n, c.queries)
			}
		}
	}
	f.Complete()
}
