package pinned_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeAllocSaysFaultHoldsDeferred: the memory an Alloc needs waits, freed with FreeAsync,
// behind a copy still queued, and a kernel faults (the context's sticky error): no reclaim can
// say whether the stream passed the free. allocRest drops its reclaims' errors; the Alloc,
// which fails, must still say why (ErrDeviceFault beside ErrOutOfMemory, from its wait for the
// deferred buffers), and the buffer stays deferred, so that the next Trim says it again. Once
// the error is cleared, the buffer comes back.
func TestFakeAllocSaysFaultHoldsDeferred(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1, Capacity: 4 << 20})
	if r == nil {
		return
	}
	const n = 3 << 20
	d := r.devAlloc(n)
	b := r.alloc(n, 7)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	fd, err := r.dev.MemAlloc(4096)
	ok(t, "MemAlloc", err)
	release := r.faultKernel(fd)

	_, aerr := r.pool.Alloc(n)
	if !errors.Is(aerr, pinned.ErrOutOfMemory) || !errors.Is(aerr, pinned.ErrDeviceFault) {
		t.Errorf("Alloc of the capacity a deferred buffer holds after a fault: %v; "+
			"want ErrOutOfMemory and ErrDeviceFault", aerr)
	}
	// The fault said once: the wait of the stream, the poll of it and the context's
	// synchronize all meet the same sticky error.
	if n := strings.Count(fmt.Sprint(aerr), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("Alloc's error says the fault %d times, want once: %v", n, aerr)
	}
	if err := r.pool.Trim(); !errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Trim after the failed Alloc: %v; want ErrDeviceFault", err)
	}
	if st := r.pool.Stats(); st.Deferred != 1 {
		t.Errorf("after the fault: %d deferred, want 1", st.Deferred)
	}

	r.f.ClearStickyError()
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	c := r.alloc(n, 9) // the buffer came back
	ok(t, "Free", r.pool.Free(c))
	release()
	ok(t, "MemFree", r.dev.MemFree(fd))
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
