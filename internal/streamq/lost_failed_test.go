package streamq_test

import (
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestRefusedLostAfterFailedRecover: a list lost on a refusal of its handle (a stream destroyed
// with its work queued) whose Recover's synchronize of the context fails, here because a
// capture on a stream the lists never saw refuses it (the lists cannot ask that stream), stays
// lost on a refused handle: RefusedLost names it, as it does after a capture the lists saw put
// Recover off, so that a caller parks its state under the handle (a device heap's parkRefused)
// before the driver gives the handle to a new stream. Before, the failed Recover forgot every
// lost list, and RefusedLost named none until the next poll found the list again.
func TestRefusedLostAfterFailedRecover(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	c := ss[0] // a stream the lists never see
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
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
	if done, err := ls.Reclaim(nil, nil); err == nil || len(done) != 0 {
		t.Fatalf("reclaim of the destroyed stream during a capture on a stream it never saw: "+
			"%v back, error %v; want nothing back, the synchronize's error", done, err)
	}
	if got := ls.RefusedLost(nil); !slices.Equal(got, []streamq.Stream{a}) {
		t.Errorf("RefusedLost after a Recover whose synchronize failed = %#x; want the "+
			"destroyed stream %#x", got, a)
	}
	if _, err := dev.StreamEndCapture(c); err == nil { // the refused synchronize ended it
		t.Log("the capture survived the refused synchronize")
	}
	f.Hold(false)
	if done, err := ls.Reclaim(nil, nil); err != nil || !slices.Equal(done, []int{1}) {
		t.Fatalf("reclaim after the capture: %v back, error %v; want [1]", done, err)
	}
	if got := ls.RefusedLost(nil); len(got) != 0 {
		t.Fatalf("RefusedLost after Recover answered = %#x; want none", got)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
