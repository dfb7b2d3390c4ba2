package fakecuda

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestVMMRules: the VMM calls refuse what the real driver refuses (measured on the H100 or
// documented).
func TestVMMRules(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, err := d.MemAddressReserve(8*gran, 0)
	must(t, "MemAddressReserve", err)
	big, err := d.MemCreate(2 * gran)
	must(t, "MemCreate", err)
	wantErr(t, "MemMap at an address not a granule multiple", d.MemMap(va+4096, 2*gran, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap of a size not a granule multiple", d.MemMap(va, gran+4096, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap of more than the allocation", d.MemMap(va, 3*gran, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap running out of the reservation", d.MemMap(va+7*gran, 2*gran, big), pinmalloc.ErrInvalidValue)
	must(t, "MemMap", d.MemMap(va, 2*gran, big))
	small, err := d.MemCreate(gran)
	must(t, "MemCreate", err)
	wantErr(t, "MemMap over a mapped range", d.MemMap(va+gran, gran, small), pinmalloc.ErrInvalidValue)
	must(t, "MemMap", d.MemMap(va+2*gran, gran, small))

	wantErr(t, "MemSetAccess of a range not fully mapped", d.MemSetAccess(va, 4*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemSetAccess of part of a mapping", d.MemSetAccess(va, gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "memset before MemSetAccess", d.MemsetD8(va, 1, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess", d.MemSetAccess(va, 3*gran))
	// A memset (device ZeroOnFree's scrub) may not run on past the mapped granules into the
	// reserved space after them: the real driver faults there.
	wantErr(t, "memset running into unmapped reserved space", d.MemsetD8(va+2*gran, 1, 2*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "async memset running into unmapped reserved space", d.MemsetD8Async(va+2*gran, 1, gran+1, 0), pinmalloc.ErrInvalidValue)
	if cpuReadable(t, va) {
		t.Error("the CPU can read device memory")
	}

	// A fresh granule reads zero; one device copy may span mappings side by side.
	host := make([]byte, 3*gran)
	for i := range host {
		host[i] = 0xAB
	}
	must(t, "DtoH", d.MemcpyDtoH(mem.Addr(host), va, 3*gran))
	for i, b := range host {
		if b != 0 {
			t.Fatalf("fresh granule byte %d = %#x", i, b)
		}
	}

	wantErr(t, "MemUnmap of part of a mapping", d.MemUnmap(va, gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemUnmap of a range cutting a mapping", d.MemUnmap(va+gran, 2*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemAddressFree with mappings left", d.MemAddressFree(va, 8*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemUnmap of two mappings at once", d.MemUnmap(va, 3*gran))
	wantErr(t, "memset after MemUnmap", d.MemsetD8(va, 1, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemRelease", d.MemRelease(big))
	must(t, "MemRelease", d.MemRelease(small))
	wantErr(t, "MemRelease twice", d.MemRelease(small), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemAddressFree of part of a reservation", d.MemAddressFree(va, 4*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemAddressFree", d.MemAddressFree(va, 8*gran))
}

// TestRegistrationRules: overlapping registrations, unregistering what is not a registration's
// base, registering memory that is not there.
func TestRegistrationRules(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	buf := make([]byte, 4*65536)
	base := (mem.Addr(buf) + 65535) &^ 65535
	must(t, "MemHostRegister", d.MemHostRegister(base, 65536, 0))
	wantErr(t, "MemHostRegister overlapping the start", d.MemHostRegister(base-4096, 8192, 0), pinmalloc.ErrAlreadyRegistered)
	wantErr(t, "MemHostRegister overlapping the end", d.MemHostRegister(base+65536-4096, 8192, 0), pinmalloc.ErrAlreadyRegistered)
	wantErr(t, "MemHostRegister covering it", d.MemHostRegister(base-4096, 2*65536, 0), pinmalloc.ErrAlreadyRegistered)
	must(t, "MemHostRegister beside it", d.MemHostRegister(base+65536, 65536, 0))
	err := d.MemHostUnregister(base + 4096)
	if r, ok := err.(cuda.Result); !ok || r != 713 {
		t.Errorf("MemHostUnregister of an interior pointer = %v, want CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", err)
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(base))
	must(t, "MemHostUnregister", d.MemHostUnregister(base+65536))
	runtime.KeepAlive(buf)

	va, err := d.MemAddressReserve(gran, 0)
	must(t, "MemAddressReserve", err)
	wantErr(t, "MemHostRegister of reserved, unmapped space", d.MemHostRegister(va, 4096, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemAddressFree", d.MemAddressFree(va, gran))
}

// TestPortableRule: registered memory without the PORTABLE flag is pinned for the context that
// made it only: another device's copy, kernel and device pointer of it are refused; with
// PORTABLE every device's are allowed (and counted pinned). cuMemHostAlloc memory is every
// context's whatever its flags (D, Unified Addressing): TestHostAllocUnifiedAddressing.
func TestPortableRule(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d1 := f.Open(t, 1)
	dst, err := d1.MemAlloc(gran)
	must(t, "MemAlloc on device 1", err)
	defer func() { must(t, "MemFree", d1.MemFree(dst)) }()
	buf, err := unix.Mmap(-1, 0, 2*gran, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "mmap", err)
	defer unix.Munmap(buf)
	const deviceMap, portable = cuda.HostRegisterDeviceMap, cuda.HostRegisterPortable
	m1, err := d1.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData on device 1", err)
	defer func() { must(t, "ModuleUnload", d1.ModuleUnload(m1)) }()
	fn, err := d1.ModuleGetFunction(m1, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	jobs, err := d1.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc jobs", err)
	defer func() { must(t, "MemFreeHost", d1.MemFreeHost(jobs)) }()
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	kernel := func(src uintptr) error { // device 1's kernel copies 4 KiB from src
		jobArray(jobs, [3]uint64{uint64(dst), uint64(src), 4096})
		if err := d1.LaunchKernel(fn, one, one, 0, 0, uint64(jobs), 1); err != nil {
			return err
		}
		err := d1.StreamSynchronize(0)
		f.ClearStickyError()
		return err
	}
	h := mem.Addr(buf)
	must(t, "MemHostRegister", d.MemHostRegister(h, gran, deviceMap))
	wantErr(t, "registered without PORTABLE: device 1's copy", d1.MemcpyHtoD(dst, h, 4096), pinmalloc.ErrInvalidValue)
	if _, err := d1.MemHostGetDevicePointer(h); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("registered without PORTABLE: device 1's device pointer: %v", err)
	}
	if _, err := d.MemHostGetDevicePointer(h); err != nil {
		t.Errorf("registered without PORTABLE: its own device's device pointer: %v", err)
	}
	wantCode(t, "registered without PORTABLE: device 1's kernel", kernel(h), ResultIllegalAddress)
	must(t, "MemHostUnregister", d.MemHostUnregister(h))
	must(t, "MemHostRegister", d.MemHostRegister(h, gran, deviceMap|portable))
	pinned := f.Stat(PinnedCopies)
	must(t, "registered PORTABLE: device 1's copy", d1.MemcpyHtoD(dst, h, 4096))
	if f.Stat(PinnedCopies) != pinned+1 {
		t.Error("registered PORTABLE: device 1's copy not counted pinned")
	}
	if _, err := d1.MemHostGetDevicePointer(h); err != nil {
		t.Errorf("registered PORTABLE: device 1's device pointer: %v", err)
	}
	must(t, "registered PORTABLE: device 1's kernel", kernel(h))
	must(t, "MemHostUnregister", d.MemHostUnregister(h))
}

// TestUnmapFreesReleasedHandle: a cuMemUnmap that frees a handle released while mapped (its
// memory goes with its last mapping) keeps walking the fake's objects safely. cudamem's VMM
// decommit releases before it unmaps; the fake's unmap then freed the handle, the object the
// walk went to next when the granule was mapped right after it was created, and read it after
// the free (it crashed uvm's TestSharedHeapConcurrent now and then; with glibc's free
// poisoning on, here, every time, before the fix).
func TestUnmapFreesReleasedHandle(t *testing.T) {
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.perturb=165")
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, err := d.MemAddressReserve(4*gran, 0)
	must(t, "MemAddressReserve", err)
	for range 3 {
		var hs []cuda.MemHandle
		for g := range uintptr(4) {
			h, err := d.MemCreate(gran)
			must(t, "MemCreate", err)
			must(t, "MemMap", d.MemMap(va+g*gran, gran, h))
			hs = append(hs, h)
		}
		for _, h := range hs {
			must(t, "MemRelease", d.MemRelease(h))
		}
		must(t, "MemUnmap", d.MemUnmap(va, 4*gran))
		if n := f.Stat(Handles) + f.Stat(Mappings); n != 0 {
			t.Fatalf("%d handles and mappings left", n)
		}
	}
	must(t, "MemAddressFree", d.MemAddressFree(va, 4*gran))
}
