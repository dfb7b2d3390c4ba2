package fakecuda

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// gatherPTX declares the kernel the fake knows how to run; its body does not matter to the fake.
const gatherPTX = `// test module
.version 7.0
.target sm_75
.address_size 64

.visible .entry pinmalloc_gather(
	.param .u64 jobs,
	.param .u64 count
)
{
	ret;
}

.visible .entry other(.param .u32 x)
{
	ret;
}
`

// jobArray writes {dst, src, len} triples into the host memory at p.
func jobArray(p uintptr, jobs ...[3]uint64) {
	b := mem.Bytes(p, uintptr(24*len(jobs)))
	for i, j := range jobs {
		for k := 0; k < 3; k++ {
			*(*uint64)(unsafe.Pointer(&b[24*i+8*k])) = j[k]
		}
	}
}

func wantCode(t *testing.T, what string, err error, code int) {
	t.Helper()
	var r cuda.Result
	if !errors.As(err, &r) || int(r) != code {
		t.Errorf("%s = %v, want CUDA result %d", what, err, code)
	}
}

// TestFakeKernel runs the bindings of launch.go against the fake: modules, the gather kernel's
// semantics, its address checks and sticky fault, and the launch-configuration checks.
func TestFakeKernel(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	if _, err := d.ModuleLoadData("this is not PTX"); err == nil {
		t.Error("loading garbage succeeded")
	}
	wantCode(t, "load PTX 9.9", func() error {
		_, err := d.ModuleLoadData(".version 9.9\n.target sm_75\n.address_size 64\n")
		return err
	}(), 222)
	wantCode(t, "load sm_100 PTX", func() error {
		_, err := d.ModuleLoadData(".version 8.0\n.target sm_100\n.address_size 64\n")
		return err
	}(), 218)
	wantCode(t, "load unbalanced PTX", func() error {
		_, err := d.ModuleLoadData(".version 7.0\n.target sm_75\n.address_size 64\n.entry x() {\n")
		return err
	}(), 218)

	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	if f.Modules() != 1 || d.Stats().Modules != 1 {
		t.Errorf("modules: fake %d, device %d", f.Modules(), d.Stats().Modules)
	}
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	wantCode(t, "missing function", func() error { _, err := d.ModuleGetFunction(m, "nope"); return err }(), 500)
	if _, err := d.ModuleGetFunction(m+8, "pinmalloc_gather"); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("function of a bad module = %v", err)
	}
	other, err := d.ModuleGetFunction(m, "other")
	must(t, "ModuleGetFunction other", err)

	// Device memory and mapped host memory; jobs in mapped host memory.
	const n = 64 << 10
	dev, err := d.MemAlloc(2 * n)
	must(t, "MemAlloc", err)
	host, err := d.MemHostAlloc(2*n, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc", err)
	// Pageable memory, which no kernel reaches (the fake's devices answer PAGEABLE_MEMORY_ACCESS
	// 0; cuMemHostAlloc memory made without DEVICEMAP is mapped for every device: unified
	// addressing, TestHostAllocUnifiedAddressing).
	pageable, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "mmap", err)
	unmapped := mem.Addr(pageable)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc jobs", err)
	defer func() {
		must(t, "MemFree", d.MemFree(dev))
		must(t, "MemFreeHost", d.MemFreeHost(host))
		must(t, "munmap", unix.Munmap(pageable))
		must(t, "MemFreeHost", d.MemFreeHost(jobs))
	}()
	src := mem.Bytes(host, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()

	one, grid := cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 2, Y: 1, Z: 1}
	block := cuda.Dim3{X: 256, Y: 1, Z: 1}
	// host → device in two jobs (one odd-sized), then device → host elsewhere. The kernel reads
	// its job array when it runs: the second launch's jobs go elsewhere in the buffer.
	jobArray(jobs, [3]uint64{uint64(dev), uint64(host), n / 2}, [3]uint64{uint64(dev + n/2), uint64(host + n/2), n/2 - 3})
	must(t, "LaunchKernel", d.LaunchKernel(fn, grid, block, 0, s, uint64(jobs), 2))
	jobArray(jobs+2048, [3]uint64{uint64(host + n), uint64(dev), n - 3})
	must(t, "LaunchKernel back", d.LaunchKernel(fn, one, block, 0, s, uint64(jobs+2048), 1))
	if f.Launches() != 0 {
		t.Errorf("kernels ran before a synchronizing call: %d", f.Launches())
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	back := mem.Bytes(host+n, n)
	if !bytes.Equal(back[:n-3], src[:n-3]) || back[n-3] != 0 {
		t.Error("the gather kernel did not move the bytes")
	}
	if f.Launches() != 2 || f.GatherJobs() != 3 {
		t.Errorf("launches %d, jobs %d", f.Launches(), f.GatherJobs())
	}

	// Launch configuration, handles and parameters.
	for _, c := range []struct {
		name        string
		grid, block cuda.Dim3
		shmem       uint32
	}{
		{"zero grid", cuda.Dim3{X: 0, Y: 1, Z: 1}, block, 0},
		{"grid y too big", cuda.Dim3{X: 1, Y: 70000, Z: 1}, block, 0},
		{"zero block", one, cuda.Dim3{X: 0, Y: 1, Z: 1}, 0},
		{"block too big", one, cuda.Dim3{X: 2048, Y: 1, Z: 1}, 0},
		{"block product too big", one, cuda.Dim3{X: 512, Y: 4, Z: 1}, 0},
		{"shared memory", one, block, 64 << 10},
	} {
		if err := d.LaunchKernel(fn, c.grid, c.block, c.shmem, s, uint64(jobs), 1); !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", c.name, err)
		}
	}
	if err := d.LaunchKernel(fn, one, block, 0, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("launch without parameters: %v", err)
	}
	if err := d.LaunchKernel(fn+1, one, block, 0, s, uint64(jobs), 1); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("bad function: %v", err)
	}
	if err := d.LaunchKernel(fn, one, block, 0, s+8, uint64(jobs), 1); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("bad stream: %v", err)
	}
	if err := d.LaunchKernel(other, one, block, 0, s, 1); !errors.Is(err, pinmalloc.ErrNotSupported) {
		t.Errorf("a kernel the fake cannot run: %v", err)
	}
	f.FailLaunch(1, ResultLaunchFailed)
	wantCode(t, "injected launch failure", d.LaunchKernel(fn, one, block, 0, s, uint64(jobs), 1), ResultLaunchFailed)

	// A job touching host memory the device cannot reach faults when the kernel runs (the
	// launch succeeds, the synchronizing call reports it, as on a GPU), and the fault is sticky.
	faults := func(what string, jobs uintptr, code int) {
		t.Helper()
		must(t, what+": launch", d.LaunchKernel(fn, one, block, 0, s, uint64(jobs), 1))
		wantCode(t, what, d.StreamSynchronize(s), code)
		if f.StickyError() != code {
			t.Errorf("%s: sticky = %d", what, f.StickyError())
		}
	}
	ev, err := d.EventCreate(true) // made before the fault: the faulted context makes none
	must(t, "EventCreate", err)
	jobArray(jobs, [3]uint64{uint64(dev), uint64(unmapped), 64})
	faults("unmapped source", jobs, ResultIllegalAddress)
	wantCode(t, "after the fault", d.MemcpyAsync(dev, host, 64, s), ResultIllegalAddress)
	// An event's record is work on the stream too: refused, as on a GPU ("any further CUDA work
	// will return the same error"); before, the fake recorded it, and a release event recorded
	// after a fault hid the fault from uvm's Release. Its creation and destruction are refused
	// too: every call of the faulted context is.
	_, err = d.EventCreate(true)
	wantCode(t, "EventCreate after the fault", err, ResultIllegalAddress)
	wantCode(t, "EventRecord after the fault", d.EventRecord(ev, s), ResultIllegalAddress)
	wantCode(t, "EventDestroy after the fault", d.EventDestroy(ev), ResultIllegalAddress)
	wantCode(t, "synchronizing after the fault", d.Synchronize(), ResultIllegalAddress)
	f.ClearStickyError()
	must(t, "EventDestroy", d.EventDestroy(ev))
	jobArray(jobs, [3]uint64{uint64(dev + 2*n - 8), uint64(host), 64}) // past the allocation's end
	faults("past the end", jobs, ResultIllegalAddress)
	f.ClearStickyError()
	faults("jobs in device-inaccessible memory", unmapped, ResultIllegalAddress)
	f.ClearStickyError()
	faults("misaligned jobs", jobs+4, 716)
	f.ClearStickyError()

	must(t, "ModuleUnload", d.ModuleUnload(m))
	if err := d.LaunchKernel(fn, one, block, 0, s, uint64(jobs), 1); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("launch after unload: %v", err)
	}
	if err := d.ModuleUnload(m); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("second unload: %v", err)
	}
	f.FailModuleLoad(1, ResultInvalidPTX)
	wantCode(t, "injected load failure", func() error { _, err := d.ModuleLoadData(gatherPTX); return err }(), ResultInvalidPTX)
}

// TestFakeCopiesAndStreams runs cuMemcpyAsync, cuMemcpyBatchAsync_v2, stream priorities and
// cuStreamWaitEvent against the fake.
func TestFakeCopiesAndStreams(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	least, greatest, err := d.StreamPriorityRange()
	must(t, "StreamPriorityRange", err)
	if least != 0 || greatest != -5 {
		t.Errorf("priority range %d..%d", least, greatest)
	}
	low, err := d.StreamCreateWithPriority(true, least)
	must(t, "StreamCreateWithPriority", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(low)) }()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()

	const n = 1 << 20
	dev, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dev)) }()
	host, err := d.MemHostAlloc(2*n, 0)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d.MemFreeHost(host)) }()
	src := mem.Bytes(host, n)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}

	// Generic copies: host → device, device → host; pageable Go memory too.
	must(t, "MemcpyAsync HtoD", d.MemcpyAsync(dev, host, n, s))
	must(t, "MemcpyAsync DtoH", d.MemcpyAsync(host+n, dev, n, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if !bytes.Equal(mem.Bytes(host+n, n), src) {
		t.Error("MemcpyAsync round trip changed the bytes")
	}
	page := make([]byte, 4096)
	must(t, "MemcpyAsync to pageable", d.MemcpyAsync(mem.Addr(page), dev, 4096, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if !bytes.Equal(page, src[:4096]) {
		t.Error("copy to pageable memory")
	}
	if err := d.MemcpyAsync(dev+n-8, host, 64, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("copy past the device allocation: %v", err)
	}
	if err := d.MemcpyAsync(dev, host+2*n-8, 64, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("copy past the host allocation: %v", err)
	}
	if err := d.MemcpyAsync(dev, host, 64, s+8); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("copy on a bad stream: %v", err)
	}

	// Batched copies: device → host in 3 pieces.
	if err := d.MemcpyBatchSupported(); err != nil {
		t.Fatalf("MemcpyBatchSupported: %v", err)
	}
	clear(mem.Bytes(host+n, n))
	dsts := []uintptr{host + n, host + n + 4096, host + n + 3*4096}
	srcs := []uintptr{dev, dev + 4096, dev + 3*4096}
	sizes := []uintptr{4096, 2 * 4096, 5}
	must(t, "MemcpyBatchAsync", d.MemcpyBatchAsync(dsts, srcs, sizes, 0, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if got := mem.Bytes(host+n, 3*4096+5); !bytes.Equal(got, src[:3*4096+5]) {
		t.Error("MemcpyBatchAsync moved the wrong bytes")
	}
	for _, legacy := range []uintptr{0, 1} { // the legacy stream, by either handle (CU_STREAM_LEGACY)
		if err := d.MemcpyBatchAsync(dsts, srcs, sizes, 0, legacy); !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("batch on the legacy stream (handle %d): %v", legacy, err)
		}
	}
	if err := d.MemcpyBatchAsync(dsts, srcs, []uintptr{4096, 0, 5}, 0, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("batch with a zero size: %v", err)
	}
	if err := d.MemcpyBatchAsync(dsts, srcs, []uintptr{4096, n, 5}, 0, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("batch past the end: %v", err)
	}
	if err := d.MemcpyBatchAsync(dsts, srcs[:2], sizes, 0, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("batch with mismatched slices: %v", err)
	}
	if err := d.MemcpyBatchAsync(dsts, srcs, sizes, 2, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("batch with bad flags: %v", err)
	}
	if f.Batches() != 1 || f.Memcpys() != 3 {
		t.Errorf("batches %d, memcpys %d", f.Batches(), f.Memcpys())
	}

	// Stream dependencies: waiting on an event never recorded is a no-op; on a pending event,
	// the waiting stream has work pending too.
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(ev)) }()
	must(t, "wait on an unrecorded event", d.StreamWaitEvent(low, ev))
	must(t, "StreamQuery", d.StreamQuery(low))
	f.Hold(true)
	must(t, "EventRecord", d.EventRecord(ev, s))
	must(t, "StreamWaitEvent", d.StreamWaitEvent(low, ev))
	if err := d.StreamQuery(low); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("stream waiting on a pending event: %v", err)
	}
	f.Complete()
	f.Hold(false)
	must(t, "StreamQuery after completion", d.StreamQuery(low))
	if err := d.StreamWaitEvent(low, ev+8); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("wait on a bad event: %v", err)
	}
	if err := d.StreamWaitEvent(s+8, ev); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("wait on a bad stream: %v", err)
	}
}

// TestFakeKernelOtherDeviceStream: a kernel launch on a stream of another device's context is
// refused (the programming guide: "A kernel launch will fail if it is issued to a stream that
// is not associated to the current device"), and queues nothing; a copy to such a stream is
// allowed, as on a GPU.
func TestFakeKernelOtherDeviceStream(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	m, err := d0.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	defer func() { must(t, "ModuleUnload", d0.ModuleUnload(m)) }()
	fn, err := d0.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	jobs, err := d0.MemAlloc(4096)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d0.MemFree(jobs)) }()
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy", d1.StreamDestroy(s1)) }()
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	wantErr(t, "LaunchKernel on device 0 with a device-1 stream", d0.LaunchKernel(fn, one, one, 0, s1, uint64(jobs), 0), pinmalloc.ErrInvalidHandle)
	must(t, "MemsetD8Async on device 0 with a device-1 stream", d0.MemsetD8Async(jobs, 0, 4096, s1))
	f.Complete()
	if n := f.Launches(); n != 0 {
		t.Errorf("the refused launch ran: %d launches", n)
	}
	s0, err := d0.StreamCreate(true)
	must(t, "StreamCreate on device 0", err)
	defer func() { must(t, "StreamDestroy", d0.StreamDestroy(s0)) }()
	must(t, "LaunchKernel on device 0's own stream", d0.LaunchKernel(fn, one, one, 0, s0, uint64(jobs), 0))
	must(t, "StreamSynchronize", d0.StreamSynchronize(s0))
	if n := f.Launches(); n != 1 {
		t.Errorf("launches = %d, want 1", n)
	}
}

// TestFakeKernelOtherContextFunction: a function belongs to the context its module was loaded
// in (the programming guide, "Context": modules are among the resources "encapsulated inside a
// CUDA context"; the CUDA blog on context-independent loading: identical device code must be
// loaded "into each CUDA context explicitly"). A launch of device 0's function with device 1's
// context current, on device 1's own stream, is refused (CUDA_ERROR_INVALID_HANDLE) and runs
// nothing; the function launches in its own context.
func TestFakeKernelOtherContextFunction(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	m, err := d0.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData on device 0", err)
	defer func() { must(t, "ModuleUnload", d0.ModuleUnload(m)) }()
	fn, err := d0.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy", d1.StreamDestroy(s1)) }()
	jobs, err := d1.MemAlloc(4096)
	must(t, "MemAlloc on device 1", err)
	defer func() { must(t, "MemFree", d1.MemFree(jobs)) }()
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	err = d1.LaunchKernel(fn, one, one, 0, s1, uint64(jobs), 0)
	wantErr(t, "LaunchKernel of device 0's function in device 1's context", err,
		pinmalloc.ErrInvalidHandle)
	must(t, "StreamSynchronize on device 1", d1.StreamSynchronize(s1))
	if n := f.Launches(); n != 0 {
		t.Errorf("the refused launch ran: %d launches", n)
	}
	m1, err := d1.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData on device 1", err)
	defer func() { must(t, "ModuleUnload on device 1", d1.ModuleUnload(m1)) }()
	fn1, err := d1.ModuleGetFunction(m1, "pinmalloc_gather")
	must(t, "ModuleGetFunction on device 1", err)
	err = d1.LaunchKernel(fn1, one, one, 0, s1, uint64(jobs), 0)
	must(t, "LaunchKernel of device 1's own function", err)
	must(t, "StreamSynchronize on device 1", d1.StreamSynchronize(s1))
	if n := f.Launches(); n != 1 {
		t.Errorf("launches = %d, want 1", n)
	}
}

// TestFakeKernelPeerMemory: a kernel reaches another device's cuMemAlloc memory only through
// peer access (the programming guide, "Peer-to-Peer Memory Access"; cuCtxEnablePeerAccess
// "enables direct access to memory allocations in a peer context"), which the fake does not
// offer: a gather on device 0 reading device 1's memory faults (CUDA_ERROR_ILLEGAL_ADDRESS,
// sticky for device 0's context) and moves nothing; a copy between the two is still allowed.
func TestFakeKernelPeerMemory(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	t.Cleanup(f.ClearStickyError) // before the devices close
	const n = 64
	p0, err := d0.MemAlloc(n)
	must(t, "MemAlloc on device 0", err)
	defer func() { must(t, "MemFree on device 0", d0.MemFree(p0)) }()
	p1, err := d1.MemAlloc(n)
	must(t, "MemAlloc on device 1", err)
	defer func() { must(t, "MemFree on device 1", d1.MemFree(p1)) }()
	must(t, "MemsetD8 on device 0", d0.MemsetD8(p0, 1, n))
	must(t, "MemsetD8 on device 1", d1.MemsetD8(p1, 2, n))
	must(t, "Synchronize device 0", d0.Synchronize())
	must(t, "Synchronize device 1", d1.Synchronize())
	jobs, err := d0.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d0.MemFreeHost(jobs)) }()
	m, err := d0.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	defer func() { must(t, "ModuleUnload", d0.ModuleUnload(m)) }()
	fn, err := d0.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	s0, err := d0.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d0.StreamDestroy(s0)) }()

	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	jobArray(jobs, [3]uint64{uint64(p0), uint64(p1), n})
	err = d0.LaunchKernel(fn, one, one, 0, s0, uint64(jobs), 1)
	must(t, "LaunchKernel reading device 1's memory", err)
	err = d0.StreamSynchronize(s0)
	wantCode(t, "StreamSynchronize of the kernel", err, ResultIllegalAddress)
	if f.StickyErrorOf(0) != ResultIllegalAddress || f.StickyErrorOf(1) != 0 {
		t.Errorf("sticky errors: device 0 %d, device 1 %d", f.StickyErrorOf(0), f.StickyErrorOf(1))
	}
	got := make([]byte, n)
	must(t, "MemcpyDtoH from device 1", d1.MemcpyDtoH(mem.Addr(got), p1, n))
	f.ClearStickyError()
	must(t, "MemcpyDtoH from device 0", d0.MemcpyDtoH(mem.Addr(got), p0, n))
	if got[0] != 1 {
		t.Errorf("the faulting kernel moved bytes: device 0 reads %d, want 1", got[0])
	}
	must(t, "MemcpyDtoD from device 1 to device 0", d0.MemcpyDtoD(p0, p1, n))
	must(t, "MemcpyDtoH from device 0", d0.MemcpyDtoH(mem.Addr(got), p0, n))
	if got[0] != 2 || got[n-1] != 2 {
		t.Errorf("the copy from device 1: %d, %d; want 2", got[0], got[n-1])
	}
}
