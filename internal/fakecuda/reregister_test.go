package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestAsyncReregisteredUnderWork: work queued over a registration that is unregistered and
// registered again before the work runs faults when it runs (CUDA_ERROR_ILLEGAL_ADDRESS,
// sticky), as if no registration held it: the pages the DMA was set up for were unpinned
// meanwhile. It holds for a copy to the range and one from it, a memset, and a batch, and for a
// new registration of the same range or of a part that still holds the work (the registration
// of a live block cut while a copy over it is in flight). Work over a registration that stays
// runs. Before, such work ran: the new registration was enough.
func TestAsyncReregisteredUnderWork(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	const n = 4 * gran
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	p := mem.Addr(b)
	// again replaces the registration of the whole range by one of its first m bytes.
	again := func(m uintptr) {
		t.Helper()
		must(t, "MemHostUnregister", d.MemHostUnregister(p))
		must(t, "MemHostRegister again", d.MemHostRegister(p, m, 0))
	}
	must(t, "MemHostRegister", d.MemHostRegister(p, n, 0))

	// A registration that stays: the copies run.
	must(t, "DtoHAsync", d.MemcpyDtoHAsync(p, x.dev, x.n, x.s))
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, p, x.n, x.s))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))

	must(t, "DtoHAsync", d.MemcpyDtoHAsync(p, x.dev, x.n, x.s))
	again(n)
	wantCode(t, "a copy to a range registered again", d.StreamSynchronize(x.s), ResultIllegalAddress)
	f.ClearStickyError()

	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, p, x.n, x.s))
	again(gran) // the copy's 64 KiB lie in the part registered again
	wantCode(t, "a copy from a registration cut", d.StreamSynchronize(x.s), ResultIllegalAddress)
	f.ClearStickyError()

	must(t, "MemsetD8Async", d.MemsetD8Async(cuda.DevicePtr(p), 7, x.n, x.s))
	again(n)
	wantCode(t, "a memset of a range registered again", d.StreamSynchronize(x.s), ResultIllegalAddress)
	f.ClearStickyError()

	if d.MemcpyBatchSupported() == nil {
		must(t, "MemcpyBatchAsync", d.MemcpyBatchAsync([]uintptr{uintptr(x.dev)}, []uintptr{p},
			[]uintptr{x.n}, 0, x.s))
		again(n)
		wantCode(t, "a batch from a range registered again", d.StreamSynchronize(x.s),
			ResultIllegalAddress)
		f.ClearStickyError()
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
}
