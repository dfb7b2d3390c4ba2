package streamq_test

import (
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestRecoverStaleLostCount: a poll finds a list lost (its record refused once), and a later poll,
// before Recover (a Reclaim whose Recover a capture put off, or Poll and Recover called apart, as
// uvm.Tier does), gives the same open items a point (or finds the stream idle and hands them back,
// or a Drain does): they are marked now (or gone), and the list's open items are newer ones.
// Recover's synchronize covers what was pushed before it; an item pushed while it runs (here in
// after, between the synchronize and the release) is not covered, and must stay while its
// stream's work is in flight. Before the count of open items the loss saw was kept in step with
// the items leaving the open list, Recover handed back the newer item as one of them.
func TestRecoverStaleLostCount(t *testing.T) {
	// A Drain in place of the second poll hands the item back and takes the emptied list out
	// of the lists: the push after the synchronize then makes a new list, which Recover does
	// not touch. The count is kept in step there too (release), for a list that keeps newer
	// items pushed while Drain waited, which no deterministic test here can place.
	for _, second := range []string{"point", "idle", "drain"} {
		testRecoverStaleLostCount(t, second)
	}
}

// testRecoverStaleLostCount is TestRecoverStaleLostCount with second, what takes the place of
// the second poll: "point" (a poll gives item 1 a point), "idle" (a poll finds the stream idle,
// item 1 comes back; the list, not empty at linger polls, stays) or "drain" (a Drain).
func testRecoverStaleLostCount(t *testing.T, second string) {
	drain := second == "drain"
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	s := ss[0]
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, s); err != nil {
		t.Fatal(err)
	}
	ls.Push(ls.Get(s), 1)
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	if done, err := ls.Poll(nil); err == nil || len(done) != 0 || ls.Lost() != 1 {
		t.Fatalf("poll with the record refused: %v back, error %v, %d lost; want nothing, an error, 1 lost", done, err, ls.Lost())
	}
	want := []int{1}
	if drain {
		if done, err := ls.Drain(nil); err != nil || len(done) != 1 || done[0] != 1 { // item 1 comes back
			t.Fatalf("drain: %v back, error %v; want [1]", done, err)
		}
		want = nil
	} else if second == "idle" {
		f.Hold(false)
		f.CompleteStream(s)
		if done, err := ls.Poll(nil); err != nil || len(done) != 1 || done[0] != 1 { // item 1 comes back
			t.Fatalf("second poll, the stream idle: %v back, error %v; want [1]", done, err)
		}
		f.Hold(true)
		want = nil
	} else if done, err := ls.Poll(nil); err != nil || len(done) != 0 { // item 1 gets a point
		t.Fatalf("second poll: %v back, error %v", done, err)
	}
	done, err := ls.Recover(nil, func() {
		// After the synchronize: work queued now, and an item pushed after it.
		if err := dev.MemsetD8Async(bufs[0], 2, 4096, s); err != nil {
			t.Fatal(err)
		}
		ls.Push(ls.Get(s), 2)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range done {
		if v == 2 && f.Pending() > 0 {
			t.Fatalf("%s: Recover gave back %v: item 2, pushed after its synchronize, "+
				"with its stream's work still queued", second, done)
		}
	}
	if !slices.Equal(done, want) {
		t.Fatalf("%s: Recover gave back %v, want %v", second, done, want)
	}
	f.Hold(false)
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
	if done, err := ls.Drain(nil); err != nil || len(done) != 1 || done[0] != 2 {
		t.Fatalf("Drain: %v, %v; want [2]", done, err)
	}
}
