package streamq_test

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestSettleSaysFaultOnce: Settle after the device faulted (the context's sticky error, which
// every call then meets) says the fault once, matching pinmalloc.ErrDeviceFault, and keeps
// every item; once the error is cleared, a Settle hands them all back. Before, it joined the
// failed query of the legacy stream to its Reclaim's failed synchronize, and said the fault
// twice (a device heap's Close said it so).
func TestSettleSaysFaultOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
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
	stickyFault(t, f, dev)
	done, s, running, err := ls.Settle(nil, nil)
	if len(done) != 0 || running || !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Fatalf("Settle after the fault: %v back, stream %#x running %v, error %v; want nothing, "+
			"not running, the fault", done, s, running, err)
	}
	if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("Settle after the fault says it %d times, want once: %v", n, err)
	}
	if w := ls.Weight(); w != 3 {
		t.Errorf("the lists weigh %d after the failed Settle, want 3: items were lost", w)
	}
	f.ClearStickyError()
	done, _, running, err = ls.Settle(nil, nil)
	slices.Sort(done)
	if err != nil || running || !slices.Equal(done, []int{0, 1, 2}) {
		t.Fatalf("Settle once the error is cleared: %v back, running %v, error %v; want [0 1 2]",
			done, running, err)
	}
}

// faultPTX declares the gather kernel the fake runs; its body does not matter to the fake.
const faultPTX = `.version 7.0
.target sm_75
.address_size 64

.visible .entry pinmalloc_gather(
	.param .u64 jobs,
	.param .u64 count
)
{
	ret;
}
`

// stickyFault launches the fake's gather kernel on a job array the device cannot reach: the
// kernel faults, and the context's error is sticky (CUDA_ERROR_ILLEGAL_ADDRESS) until the fake
// clears it (at cleanup, at the latest, before the cleanups registered earlier).
func stickyFault(t *testing.T, f *fakecuda.Driver, d *cuda.Device) {
	t.Helper()
	m, err := d.ModuleLoadData(faultPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.ModuleUnload(m); err != nil {
			t.Error(err)
		}
	})
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	if err != nil {
		t.Fatal(err)
	}
	pageable := make([]uint64, 8)
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	if err := d.LaunchKernel(fn, one, one, 0, 0, uint64(mem.WordsAddr(pageable)), 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.ClearStickyError)
	if err := d.Synchronize(); err == nil || f.StickyError() != fakecuda.ResultIllegalAddress {
		t.Fatalf("the faulting kernel left no sticky error: %v", err)
	}
	runtime.KeepAlive(pageable)
}
