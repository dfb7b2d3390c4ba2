package fakecuda

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeUnloadWithLaunchQueued pins the fake's choice for cuModuleUnload while a launch of
// the module's function is still queued (fakedriver.c.in, "Kernels"; UNMEASURED, the driver
// API leaves it undefined): the unload succeeds, the launch still runs when its stream reaches
// it and moves its bytes, and the function is refused from then on. copyengine.Batcher never
// asks it (it keeps its module while a launch may still run), so a change here is the fake's
// to decide, with a GPU's answer behind it.
func TestFakeUnloadWithLaunchQueued(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	dev, err := d.MemAlloc(2 * n)
	must(t, "MemAlloc", err)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() {
		must(t, "StreamDestroy", d.StreamDestroy(s))
		must(t, "MemFree", d.MemFree(dev))
		must(t, "MemFreeHost", d.MemFreeHost(jobs))
	}()
	must(t, "MemsetD8", d.MemsetD8(dev, 7, n))
	must(t, "MemsetD8", d.MemsetD8(dev+n, 0, n))
	must(t, "Synchronize", d.Synchronize()) // the legacy stream's memsets before s's launch
	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	jobArray(jobs, [3]uint64{uint64(dev + n), uint64(dev), n})
	f.Hold(true)
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, one, 0, s, uint64(jobs), 1))
	must(t, "ModuleUnload with the launch queued", d.ModuleUnload(m))
	f.Hold(false)
	if f.Launches() != 0 {
		t.Fatalf("the launch ran before a synchronizing call: %d", f.Launches())
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if f.Launches() != 1 {
		t.Errorf("launches %d after the synchronize, want 1", f.Launches())
	}
	out := make([]byte, n)
	must(t, "MemcpyDtoH", d.MemcpyDtoH(mem.Addr(out), dev+n, n))
	for i, b := range out {
		if b != 7 {
			t.Fatalf("byte %d = %d after the queued launch ran, want 7", i, b)
		}
	}
	err = d.LaunchKernel(fn, one, one, 0, s, uint64(jobs), 1)
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("LaunchKernel of an unloaded module's function = %v, want ErrInvalidHandle", err)
	}
}
