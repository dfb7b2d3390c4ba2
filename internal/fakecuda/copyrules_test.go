package fakecuda

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// copies tries every host-pointer copy (HtoD, DtoH, sync and async) of [h, h+n) against the
// device buffer dp, and returns the errors.
func copies(d *cuda.Device, dp cuda.DevicePtr, h, n uintptr) []error {
	return []error{
		d.MemcpyHtoD(dp, h, n),
		d.MemcpyDtoH(h, dp, n),
		d.MemcpyHtoDAsync(dp, h, n, 0),
		d.MemcpyDtoHAsync(h, dp, n, 0),
	}
}

func wantCopies(t *testing.T, what string, errs []error, want error) {
	t.Helper()
	for i, err := range errs {
		wantErr(t, what+[]string{" HtoD", " DtoH", " HtoDAsync", " DtoHAsync"}[i], err, want)
	}
}

// counts returns the fake's copy counters.
func counts(f *Driver) [4]int64 {
	return [4]int64{f.Stat(PinnedCopies), f.Stat(PinnedBytes), f.Stat(PageableCopies), f.Stat(PageableBytes)}
}

// TestCopyHostRegistrations: a copy's host range must lie inside one registration (the rule
// measured on the H100); one that touches none is pageable and counted so.
func TestCopyHostRegistrations(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 6 << 20
	dp, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	buf := make([]byte, n+8192)
	base := (mem.Addr(buf) + 4095) &^ 4095
	// Three registrations side by side, 2 MiB each.
	for i := uintptr(0); i < 3; i++ {
		must(t, "MemHostRegister", d.MemHostRegister(base+i*gran, gran, 0))
	}
	before := counts(f)
	wantCopies(t, "inside one registration", copies(d, dp, base+gran+100, gran-100), nil)
	if c := counts(f); c[0]-before[0] != 4 || c[1]-before[1] != 4*(gran-100) || c[2] != before[2] {
		t.Errorf("counters after 4 pinned copies: %v -> %v", before, c)
	}
	wantCopies(t, "straddling two registrations", copies(d, dp, base+gran/2, gran), pinmalloc.ErrInvalidValue)
	wantCopies(t, "spanning three registrations", copies(d, dp, base, 3*gran), pinmalloc.ErrInvalidValue)
	wantCopies(t, "half registered, half not", copies(d, dp, base+3*gran-4096, 8192), pinmalloc.ErrInvalidValue)
	if c := counts(f); c[0]-before[0] != 4 || c[2] != before[2] {
		t.Errorf("refused copies were counted: %v -> %v", before, c)
	}

	// Pageable: no pinned memory touched at all.
	page := make([]byte, 3*gran)
	wantCopies(t, "pageable", copies(d, dp, mem.Addr(page), uintptr(len(page))), nil)
	if c := counts(f); c[2]-before[2] != 4 || c[3]-before[3] != 4*3*gran {
		t.Errorf("counters after 4 pageable copies: %v -> %v", before, c)
	}
	wantCopies(t, "from device memory as a host pointer", copies(d, dp, dp, 16), pinmalloc.ErrInvalidValue)
	for i := uintptr(0); i < 3; i++ {
		must(t, "MemHostUnregister", d.MemHostUnregister(base+i*gran))
	}
	runtime.KeepAlive(buf) // registered Go memory must outlive its registrations

	// One cuMemHostAlloc block, and past its end.
	hp, err := d.MemHostAlloc(3*gran, 0)
	must(t, "MemHostAlloc", err)
	wantCopies(t, "inside a cuMemHostAlloc block", copies(d, dp, hp, 3*gran), nil)
	hp2, err := d.MemHostAlloc(gran, 0)
	must(t, "MemHostAlloc", err)
	wantCopies(t, "past a cuMemHostAlloc block's end", copies(d, dp, hp+2*gran, gran+1), pinmalloc.ErrInvalidValue)
	must(t, "MemFreeHost", d.MemFreeHost(hp2))
	must(t, "MemFreeHost", d.MemFreeHost(hp))

	// A registration inside cuMemHostAlloc memory is already pinned.
	hp, err = d.MemHostAlloc(gran, 0)
	must(t, "MemHostAlloc", err)
	wantErr(t, "MemHostRegister of cuMemHostAlloc memory", d.MemHostRegister(hp, 4096, 0), pinmalloc.ErrAlreadyRegistered)
	must(t, "MemFreeHost", d.MemFreeHost(hp))
	must(t, "MemFree", d.MemFree(dp))
}

// TestCopyHostVMM: a copy's host range may span many separately created host granules mapped
// side by side in one reservation, all granting the copying device access (measured: one
// 128 MiB copy over 64 granules works); not a granule without access, not unmapped space.
func TestCopyHostVMM(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const ng = 8
	va, hs := hostGranules(t, f, d, ng+1, ng) // the last granule stays unmapped
	dp, err := d.MemAlloc(ng * gran)
	must(t, "MemAlloc", err)
	wantCopies(t, "before any access", copies(d, dp, va, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess(host)", f.MemSetAccess(d, va, ng*gran, Access{hostLoc, rw}))
	wantCopies(t, "with only the host granted access", copies(d, dp, va, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess(device)", f.MemSetAccess(d, va, (ng-1)*gran, Access{dev0, rw}))
	wantCopies(t, "reaching a granule without device access", copies(d, dp, va+gran, (ng-1)*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess(device)", f.MemSetAccess(d, va+(ng-1)*gran, gran, Access{dev0, rw}))

	src := mem.Bytes(va, ng*gran)
	for i := range src {
		src[i] = byte(i*7 + i>>20)
	}
	want := append([]byte(nil), src...)
	before := counts(f)
	must(t, "HtoD across 8 granules", d.MemcpyHtoD(dp, va, ng*gran))
	clear(src)
	must(t, "DtoH across 8 granules", d.MemcpyDtoHAsync(va+1, dp, ng*gran-1, 0))
	must(t, "StreamSynchronize", d.StreamSynchronize(0)) // the copy is queued until then
	if !bytes.Equal(src[1:], want[:ng*gran-1]) {
		t.Error("round trip through 8 host granules changed the data")
	}
	if c := counts(f); c[0]-before[0] != 2 || c[2] != before[2] {
		t.Errorf("copies over host granules not counted pinned: %v -> %v", before, c)
	}
	wantCopies(t, "running into unmapped reserved space", copies(d, dp, va+(ng-1)*gran, gran+1), pinmalloc.ErrInvalidValue)
	wantCopies(t, "running past the reservation", copies(d, dp, va+ng*gran-16, 32), pinmalloc.ErrInvalidValue)

	// Device reads of host granules (zero copy): DtoD from them, memset of them.
	must(t, "DtoD from host granules", d.MemcpyDtoD(dp, va, ng*gran))
	must(t, "memset of a host granule", d.MemsetD8(va, 9, 100))
	if src[99] != 9 || src[100] == 9 && want[99] != 9 {
		t.Error("memset of a host granule did not reach the CPU's view")
	}

	// Decommit a middle granule: copies across it fail, a fresh one reads zero.
	must(t, "MemUnmap", d.MemUnmap(va+3*gran, gran))
	must(t, "MemRelease", f.MemRelease(d, hs[3]))
	wantCopies(t, "across a decommitted granule", copies(d, dp, va+2*gran, 2*gran), pinmalloc.ErrInvalidValue)
	hs[3], err = f.MemCreate(d, gran, hostLoc, 0)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(va+3*gran, gran, hs[3]))
	must(t, "MemSetAccess", f.MemSetAccess(d, va+3*gran, gran, Access{dev0, rw}, Access{hostLoc, rw}))
	if b := mem.Bytes(va+3*gran, gran); b[0] != 0 || b[gran/2] != 0 || b[gran-1] != 0 {
		t.Error("a recommitted host granule does not read zero")
	}
	wantCopies(t, "across a recommitted granule", copies(d, dp, va+2*gran, 2*gran), nil)
	wantErr(t, "MemHostRegister of mapped host granules", d.MemHostRegister(va, gran, 0), pinmalloc.ErrAlreadyRegistered)
	must(t, "MemFree", d.MemFree(dp))
	freeGranules(t, f, d, va, ng+1, hs)
}

// TestCopyTwoDevices: a host granule's device access is per device.
func TestCopyTwoDevices(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	va, hs := hostGranules(t, f, d0, 1, 1)
	must(t, "MemSetAccess(device 0)", f.MemSetAccess(d0, va, gran, Access{dev0, rw}, Access{hostLoc, rw}))
	dp1, err := d1.MemAlloc(gran)
	must(t, "MemAlloc on device 1", err)
	wantCopies(t, "by device 1 without access", copies(d1, dp1, va, gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "DtoD by device 1 without access", d1.MemcpyDtoD(dp1, va, gran), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess(device 1)", f.MemSetAccess(d0, va, gran, Access{cuda.MemLocation{Type: locDevice, ID: 1}, rw}))
	wantCopies(t, "by device 1 with access", copies(d1, dp1, va, gran), nil)
	must(t, "MemFree", d1.MemFree(dp1))
	freeGranules(t, f, d0, va, 1, hs)
}

// TestCopyRulesOtherPaths holds the generic copy (cuMemcpyAsync), the batch API and the gather
// kernel to the same host-side rules as HtoD/DtoH: inside one registration works, across two
// is CUDA_ERROR_INVALID_VALUE (a kernel: CUDA_ERROR_ILLEGAL_ADDRESS, sticky), and VMM host
// granules need the device's access; the kernel reads registered memory only when it was
// registered DEVICEMAP.
func TestCopyRulesOtherPaths(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	dp, err := d.MemAlloc(2 * gran)
	must(t, "MemAlloc", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	buf := make([]byte, 2*gran+8192)
	base := (mem.Addr(buf) + 4095) &^ 4095
	for i := uintptr(0); i < 2; i++ {
		must(t, "MemHostRegister", d.MemHostRegister(base+i*gran, gran, cuda.HostRegisterDeviceMap))
	}
	paths := func(h, n uintptr) []error {
		return []error{
			d.MemcpyAsync(dp, h, n, s),
			d.MemcpyAsync(h, dp, n, s),
			d.MemcpyBatchAsync([]uintptr{dp}, []uintptr{h}, []uintptr{n}, 0, s),
			d.MemcpyBatchAsync([]uintptr{h}, []uintptr{dp}, []uintptr{n}, 0, s),
		}
	}
	want := func(what string, errs []error, want error) {
		t.Helper()
		for i, err := range errs {
			wantErr(t, what+[]string{" MemcpyAsync HtoD", " MemcpyAsync DtoH", " batch HtoD", " batch DtoH"}[i], err, want)
		}
	}
	want("inside one registration", paths(base+100, gran-100), nil)
	want("across two registrations", paths(base+gran/2, gran), pinmalloc.ErrInvalidValue)

	va, hs := hostGranules(t, f, d, 2, 2)
	must(t, "MemSetAccess(host)", f.MemSetAccess(d, va, 2*gran, Access{hostLoc, rw}))
	want("host granules without device access", paths(va, 2*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess(device)", f.MemSetAccess(d, va, 2*gran, Access{dev0, rw}))
	want("host granules with device access", paths(va, 2*gran), nil)

	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc jobs", err)
	one, block := cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}
	launch := func(dst, src, n uintptr) error { // the job array is reused: wait for the kernel
		jobArray(jobs, [3]uint64{uint64(dst), uint64(src), uint64(n)})
		if err := d.LaunchKernel(fn, one, block, 0, s, uint64(jobs), 1); err != nil {
			return err
		}
		return d.StreamSynchronize(s) // where a kernel's fault shows
	}
	must(t, "kernel from host granules", launch(dp, va, 2*gran))
	must(t, "kernel from one registration", launch(dp, base+100, gran-100))
	wantCode(t, "kernel across two registrations", launch(dp, base+gran/2, gran), ResultIllegalAddress)
	f.ClearStickyError()

	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "ModuleUnload", d.ModuleUnload(m))
	must(t, "MemFreeHost", d.MemFreeHost(jobs))
	freeGranules(t, f, d, va, 2, hs)
	for i := uintptr(0); i < 2; i++ {
		must(t, "MemHostUnregister", d.MemHostUnregister(base+i*gran))
	}
	runtime.KeepAlive(buf)
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "MemFree", d.MemFree(dp))
}
