package streamq_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestPollDrainSayFaultOnce: after the device faulted (the context's sticky error, which every
// call then meets), a Poll and a Drain of three streams with items say the fault once, matching
// pinmalloc.ErrDeviceFault, with how many streams met it, and keep every item for Recover (the
// lists lost); once the error is cleared, Recover hands them all back. Before, each said the
// fault once per stream.
func TestPollDrainSayFaultOnce(t *testing.T) {
	for _, drain := range []bool{false, true} {
		testPollDrainSayFaultOnce(t, drain)
	}
}

func testPollDrainSayFaultOnce(t *testing.T, drain bool) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ls := faultedItems(t, f, dev)
	what, call := "Poll", ls.Poll
	if drain {
		what, call = "Drain", ls.Drain
	}
	done, err := call(nil)
	if len(done) != 0 || !errors.Is(err, pinmalloc.ErrDeviceFault) || ls.Lost() != 3 {
		t.Fatalf("%s after the fault: %v back, error %v, %d lists lost; want nothing, the fault, 3",
			what, done, err, ls.Lost())
	}
	if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("%s after the fault says it %d times, want once: %v", what, n, err)
	}
	if !strings.Contains(err.Error(), "3 streams") {
		t.Errorf("%s after the fault does not say how many streams met it: %v", what, err)
	}
	f.ClearStickyError()
	done, err = ls.Recover(nil, nil)
	slices.Sort(done)
	if err != nil || !slices.Equal(done, []int{0, 1, 2}) {
		t.Fatalf("Recover once the error is cleared: %v back, error %v; want [0 1 2]", done, err)
	}
}

// faultedItems returns lists holding items 0, 1 and 2, one on each of three streams of dev
// after a memset there, each with a point recorded, and then the device faulted (f.Fault).
func faultedItems(t *testing.T, f *fakecuda.Driver, dev *cuda.Device) *streamq.Lists[int] {
	t.Helper()
	ss, bufs, p, _ := testStreams(t, dev, 3)
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	f.Hold(true)
	for i, s := range ss {
		if err := dev.MemsetD8Async(bufs[i], 1, 4096, s); err != nil {
			t.Fatal(err)
		}
		ls.Push(ls.Get(s), i)
	}
	if done, err := ls.Poll(nil); err != nil || len(done) != 0 { // each stream's item gets a point
		t.Fatalf("poll: %v back, error %v; want nothing", done, err)
	}
	f.Hold(false)
	f.Fault(t, dev)
	return ls
}
