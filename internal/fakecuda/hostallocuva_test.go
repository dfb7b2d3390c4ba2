package fakecuda

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestHostAllocUnifiedAddressing: cuMemHostAlloc memory is every context's, and its host
// pointer is its device pointer, whatever its flags (D, Unified Addressing, "Automatic Mapping
// of Host Allocated Host Memory": such memory "is always directly accessible from all contexts
// on all devices that support unified addressing. This is the case regardless of whether or
// not the flags CU_MEMHOSTALLOC_PORTABLE and CU_MEMHOSTALLOC_DEVICEMAP are specified"; the
// fake's devices answer UNIFIED_ADDRESSING 1). So memory allocated with no flag on device 0 is
// copied by device 1 (counted pinned) and read and written by both devices' kernels through
// its host pointer. What the documentation still refuses stays refused: cuMemHostGetDevicePointer
// of memory allocated without DEVICEMAP (D: it "will fail if the CU_MEMHOSTALLOC_DEVICEMAP flag
// was not specified"), a kernel's access through the host pointer of write-combined memory
// (D: its device pointer is not its host pointer), and a kernel's access to memory registered
// without CU_MEMHOSTREGISTER_DEVICEMAP. Before, the fake refused another device's copies,
// kernels and device pointers of cuMemHostAlloc memory made without PORTABLE, and every
// kernel's access to such memory made without DEVICEMAP.
func TestHostAllocUnifiedAddressing(t *testing.T) {
	f, d0 := RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d1 := f.Open(t, 1)
	const n = 4096
	// Memory with no flag, on device 0: a source page, a destination page, and a job array of
	// each device's kernel.
	h, err := d0.MemHostAlloc(4*n, 0)
	must(t, "MemHostAlloc with no flag", err)
	defer func() { must(t, "MemFreeHost", d0.MemFreeHost(h)) }()
	src, back := mem.Bytes(h, n), mem.Bytes(h+n, n)
	for i := range src {
		src[i] = byte(i*5 + 1)
	}
	type gpu struct {
		d    *cuda.Device
		fn   cuda.Function
		dev  cuda.DevicePtr
		jobs uintptr
	}
	var gpus [2]gpu
	for i, d := range []*cuda.Device{d0, d1} {
		g := &gpus[i]
		g.d, g.jobs = d, h+uintptr(2+i)*n
		var err error
		g.dev, err = d.MemAlloc(n)
		must(t, "MemAlloc", err)
		defer func() { must(t, "MemFree", d.MemFree(g.dev)) }()
		m, err := d.ModuleLoadData(gatherPTX)
		must(t, "ModuleLoadData", err)
		defer func() { must(t, "ModuleUnload", d.ModuleUnload(m)) }()
		g.fn, err = d.ModuleGetFunction(m, "pinmalloc_gather")
		must(t, "ModuleGetFunction", err)
	}
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	// kernel runs one gather job of n bytes on g's device, its job array at jobs, and returns
	// what the synchronizing call answered (a fault cleared).
	kernel := func(g *gpu, jobs, dst, src uintptr) error {
		jobArray(jobs, [3]uint64{uint64(dst), uint64(src), n})
		if err := g.d.LaunchKernel(g.fn, one, one, 0, 0, uint64(jobs), 1); err != nil {
			return err
		}
		err := g.d.StreamSynchronize(0)
		f.ClearStickyError()
		return err
	}

	for i := range gpus {
		g := &gpus[i]
		clear(back)
		// The device's kernel reads the memory into its device memory and writes it back
		// elsewhere in the block, through the host pointers, its job array there too.
		answer(t, "a kernel reading cuMemHostAlloc memory made with no flag", kernel(g, g.jobs, uintptr(g.dev), h), 0)
		answer(t, "a kernel writing cuMemHostAlloc memory made with no flag", kernel(g, g.jobs, h+n, uintptr(g.dev)), 0)
		if !bytes.Equal(back, src) {
			t.Errorf("device %d's kernels did not move the bytes through the host pointers", i)
		}
	}
	pinned := f.Stat(PinnedCopies)
	answer(t, "device 1's copy of device 0's cuMemHostAlloc memory made with no flag", d1.MemcpyHtoD(gpus[1].dev, h, n), 0)
	if f.Stat(PinnedCopies) != pinned+1 {
		t.Error("device 1's copy of device 0's cuMemHostAlloc memory was not counted pinned")
	}
	for i, d := range []*cuda.Device{d0, d1} {
		if _, err := d.MemHostGetDevicePointer(h); !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("device %d's device pointer of memory allocated without DEVICEMAP: %v, want ErrInvalidValue", i, err)
		}
	}

	// DEVICEMAP without PORTABLE: every device's device pointer, the host pointer.
	hm, err := d0.MemHostAlloc(n, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc DEVICEMAP", err)
	defer func() { must(t, "MemFreeHost", d0.MemFreeHost(hm)) }()
	for i, d := range []*cuda.Device{d0, d1} {
		if p, err := d.MemHostGetDevicePointer(hm); err != nil || p != cuda.DevicePtr(hm) {
			t.Errorf("device %d's device pointer of DEVICEMAP memory allocated on device 0: %#x, %v; want %#x", i, p, err, hm)
		}
	}

	// Write-combined memory: every context's to copy, not a kernel's through its host pointer.
	wc, err := d0.MemHostAlloc(n, cuda.HostAllocWriteCombined)
	must(t, "MemHostAlloc WRITECOMBINED", err)
	defer func() { must(t, "MemFreeHost", d0.MemFreeHost(wc)) }()
	answer(t, "device 1's copy of write-combined memory", d1.MemcpyHtoD(gpus[1].dev, wc, n), 0)
	wantCode(t, "a kernel reading write-combined memory through its host pointer",
		kernel(&gpus[0], gpus[0].jobs, uintptr(gpus[0].dev), wc), ResultIllegalAddress)

	// Registered memory without DEVICEMAP: no kernel's, not even its own device's.
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "mmap", err)
	defer func() { must(t, "munmap", unix.Munmap(buf)) }()
	r := mem.Addr(buf)
	must(t, "MemHostRegister PORTABLE", d0.MemHostRegister(r, n, cuda.HostRegisterPortable))
	wantCode(t, "its own device's kernel reading memory registered without DEVICEMAP",
		kernel(&gpus[0], gpus[0].jobs, uintptr(gpus[0].dev), r), ResultIllegalAddress)
	if _, err := d0.MemHostGetDevicePointer(r); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("device pointer of memory registered without DEVICEMAP: %v, want ErrInvalidValue", err)
	}
	must(t, "MemHostUnregister", d0.MemHostUnregister(r))
}
