package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCaptureVMMAndUnregister: cuMemHostUnregister and the VMM calls (cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease) are allowed on the thread capturing GLOBAL, in
// its default GLOBAL mode, and leave the capture valid. The fake's choice, UNMEASURED: the
// driver API names cudaMalloc as a potentially unsafe call and gives no list, and no report
// says the driver refuses these (cuMemHostRegister is refused: TestCaptureUnsafeRegister).
// pinmalloc's providers make them in the RELAXED mode, so either answer leaves them working;
// TestCUDACaptureRules asks a GPU, where an answer that differs fails the rule and the fake
// must follow it.
func TestCaptureVMMAndUnregister(t *testing.T) { onFake(t, captureVMMAndUnregister) }

func captureVMMAndUnregister(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	p := mem.Addr(b)
	must(t, "MemHostRegister", d.MemHostRegister(p, uintptr(len(b)), 0))
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemHostUnregister during a GLOBAL capture", d.MemHostUnregister(p), 0)
	endValid(t, d, x.s)

	g, _, err := d.MemGetAllocationGranularity()
	must(t, "MemGetAllocationGranularity", err)
	va, err := d.MemAddressReserve(g, 0)
	must(t, "MemAddressReserve", err)
	defer func() { must(t, "MemAddressFree", d.MemAddressFree(va, g)) }()
	capture(t, d, x.s, cuda.CaptureGlobal)
	h, err := d.MemCreate(g)
	answer(t, "MemCreate during a GLOBAL capture", err, 0)
	if err == nil {
		answer(t, "MemMap during a GLOBAL capture", d.MemMap(va, g, h), 0)
		answer(t, "MemSetAccess during a GLOBAL capture", d.MemSetAccess(va, g), 0)
		answer(t, "MemUnmap during a GLOBAL capture", d.MemUnmap(va, g), 0)
		answer(t, "MemRelease during a GLOBAL capture", d.MemRelease(h), 0)
	}
	endValid(t, d, x.s)
}
