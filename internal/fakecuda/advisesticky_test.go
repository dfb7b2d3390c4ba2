package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestAdviseSticky: after a fault, cuMemAdvise_v2 of the faulted context answers its sticky
// error, as cuMemPrefetchAsync_v2 and every other call of the context do, and works again once
// the error is forgotten.
func TestAdviseSticky(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	t.Cleanup(f.ClearStickyError) // before the device closes
	const n = 1 << 20
	p, err := d.MemAllocManaged(n, cuda.MemAttachGlobal)
	must(t, "MemAllocManaged", err)
	defer func() { must(t, "MemFreeManaged", d.MemFreeManaged(p)) }()
	loc := cuda.MemLocation{Type: 1, ID: 0} // CU_MEM_LOCATION_TYPE_DEVICE, device 0
	const setReadMostly = 1
	must(t, "MemAdvise before the fault", d.MemAdvise(p, n, setReadMostly, loc))

	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() {
		f.ClearStickyError()
		must(t, "StreamDestroy", d.StreamDestroy(s))
		must(t, "ModuleUnload", d.ModuleUnload(m))
	}()
	pageable := make([]uint64, 8) // the device cannot reach it: the kernel faults
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, one, 0, s, uint64(mem.WordsAddr(pageable)), 1))
	wantCode(t, "StreamSynchronize of the faulting kernel", d.StreamSynchronize(s),
		ResultIllegalAddress)
	runtime.KeepAlive(pageable)

	wantCode(t, "MemPrefetchAsync after the fault", d.MemPrefetchAsync(p, n, loc, s),
		ResultIllegalAddress)
	wantCode(t, "MemAdvise after the fault", d.MemAdvise(p, n, setReadMostly, loc),
		ResultIllegalAddress)
	f.ClearStickyError()
	must(t, "MemAdvise after the error is forgotten", d.MemAdvise(p, n, setReadMostly+1, loc))
}
