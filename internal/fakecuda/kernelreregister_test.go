package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestKernelReregisteredUnderLaunch: a gather launch whose job ranges, or job array, lie in
// registered host memory (DEVICEMAP) that is unregistered and registered again before the
// kernel runs faults when it runs (CUDA_ERROR_ILLEGAL_ADDRESS, sticky), as queued copies,
// memsets and batches over such a registration do (TestAsyncReregisteredUnderWork); so does
// one whose range was registered only after the launch. A registration that stays runs.
// Before, the kernel ran: the registration present when it ran was enough.
func TestKernelReregisteredUnderLaunch(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 4 * gran
	dev, err := d.MemAlloc(gran)
	must(t, "MemAlloc", err)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc jobs", err)
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	p := mem.Addr(b)
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
		must(t, "Munmap", unix.Munmap(b))
		must(t, "MemFreeHost", d.MemFreeHost(jobs))
		must(t, "MemFree", d.MemFree(dev))
	}()
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	launch := func(what string, jobs uintptr) {
		t.Helper()
		must(t, what+": LaunchKernel", d.LaunchKernel(fn, one, one, 0, s, uint64(jobs), 1))
	}
	// again replaces the registration of [p, p+n) by a new one of its first m bytes.
	again := func(m uintptr) {
		t.Helper()
		must(t, "MemHostUnregister", d.MemHostUnregister(p))
		must(t, "MemHostRegister again", d.MemHostRegister(p, m, cuda.HostRegisterDeviceMap))
	}
	must(t, "MemHostRegister", d.MemHostRegister(p, n, cuda.HostRegisterDeviceMap))

	// A registration that stays: the kernel runs, both ways.
	jobArray(jobs, [3]uint64{uint64(dev), uint64(p), 4096}, [3]uint64{uint64(p + 8192), uint64(dev), 4096})
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, one, 0, s, uint64(jobs), 2))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))

	jobArray(jobs, [3]uint64{uint64(dev), uint64(p), 4096})
	launch("a job from a registration", jobs)
	again(n)
	wantCode(t, "a job from a range registered again", d.StreamSynchronize(s), ResultIllegalAddress)
	f.ClearStickyError()

	jobArray(jobs, [3]uint64{uint64(p + 8192), uint64(dev), 4096})
	launch("a job to a registration", jobs)
	again(gran) // the job lies in the part registered again
	wantCode(t, "a job to a registration cut", d.StreamSynchronize(s), ResultIllegalAddress)
	f.ClearStickyError()

	// The job array itself in a registration made again.
	jobArray(p, [3]uint64{uint64(dev), uint64(jobs + 2048), 64})
	launch("a job array in a registration", p)
	again(n)
	wantCode(t, "a job array in a range registered again", d.StreamSynchronize(s),
		ResultIllegalAddress)
	f.ClearStickyError()

	// A range registered only after the launch.
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
	jobArray(jobs, [3]uint64{uint64(dev), uint64(p), 4096})
	launch("a job from unregistered memory", jobs)
	must(t, "MemHostRegister after the launch", d.MemHostRegister(p, n, cuda.HostRegisterDeviceMap))
	wantCode(t, "a job from a range registered after the launch", d.StreamSynchronize(s),
		ResultIllegalAddress)
	f.ClearStickyError()
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
}
