package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

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

// Fault makes a kernel fault on dev's context, for a test of what the library does after a
// device fault: it launches the fake's gather kernel on the legacy stream, on a job array of
// pageable host memory, which the device cannot reach, and synchronizes the stream; the
// context's error is sticky (ResultIllegalAddress) from then on, as on a GPU. At t's cleanup
// the error is cleared, and the kernel's module unloaded, before the cleanups registered
// earlier run (a Close, the test's streams).
func (d *Driver) Fault(t testing.TB, dev *cuda.Device) {
	t.Helper()
	m, err := dev.ModuleLoadData(faultPTX)
	if err != nil {
		t.Fatalf("fakecuda: loading the faulting kernel: %v", err)
	}
	t.Cleanup(func() {
		if err := dev.ModuleUnload(m); err != nil {
			t.Errorf("fakecuda: unloading the faulting kernel: %v", err)
		}
	})
	fn, err := dev.ModuleGetFunction(m, "pinmalloc_gather")
	if err != nil {
		t.Fatalf("fakecuda: the faulting kernel: %v", err)
	}
	pageable := make([]uint64, 8)
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	if err := dev.LaunchKernel(fn, one, one, 0, 0, uint64(mem.WordsAddr(pageable)), 1); err != nil {
		t.Fatalf("fakecuda: launching the faulting kernel: %v", err)
	}
	t.Cleanup(d.ClearStickyError)
	// The legacy stream's synchronize, not the context's: legal beside a capture of a
	// non-blocking stream.
	if err := dev.StreamSynchronize(0); err == nil || d.StickyError() != ResultIllegalAddress {
		t.Fatalf("fakecuda: the faulting kernel left no sticky error: %v", err)
	}
	runtime.KeepAlive(pageable) // the driver read its address until the synchronize
}
