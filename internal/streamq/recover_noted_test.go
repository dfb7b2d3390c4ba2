package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestRecoverAnswersANotedRefusal: a caller's own query of a destroyed stream notes the
// refusal of its handle on its list (NoteRefused, as pinned's drainPend does), its item open;
// the reclaimer's next Reclaim finds the list lost (Poll) and synchronizes the context
// (Recover), which covers the item: that one Reclaim hands it back. Before, Poll returned
// such a list lost without counting its open items for Recover, so Recover's synchronize gave
// back none of them and they waited for a later poll.
func TestRecoverAnswersANotedRefusal(t *testing.T) {
	ls := notedRefusal(t)
	if ls == nil {
		return
	}
	done, err := ls.Reclaim(nil, nil)
	if err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("Reclaim after the noted refusal: %v back, error %v; want [1], its "+
			"synchronize of the context covering the item", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverAfterDrainAnswersANotedRefusal is TestRecoverAnswersANotedRefusal with Drain
// finding the list lost (pinned's Trim): Drain keeps it for Recover, whose synchronize of the
// context hands its open item back. Before, Drain kept it without counting its open items.
func TestRecoverAfterDrainAnswersANotedRefusal(t *testing.T) {
	ls := notedRefusal(t)
	if ls == nil {
		return
	}
	if done, err := ls.Drain(nil); err == nil || len(done) != 0 {
		t.Fatalf("Drain of the refused list: %v back, error %v; want none, the refusal", done, err)
	}
	done, err := ls.Recover(nil, nil)
	if err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("Recover after Drain: %v back, error %v; want [1]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// notedRefusal returns lists holding item 1 on a stream destroyed with its memset queued, the
// refusal of its handle noted by a caller's own query (NoteRefused, as pinned's drainPend
// notes it); nil where the fake cannot run.
func notedRefusal(t *testing.T) *streamq.Lists[int] {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil
	}
	_, bufs, p, _ := testStreams(t, dev, 1)
	ls := countLists(p, 1)
	a, l := checkedStream(t, dev, ls, false)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	ls.Push(l, 1)
	if err := dev.StreamDestroy(a); err != nil {
		t.Fatal(err)
	}
	idle, err := ls.Idle(l)
	if err == nil {
		t.Fatalf("Idle of the destroyed stream's list = %v, nil; want the driver's refusal", idle)
	}
	ls.NoteRefused(l, err)
	return ls
}
