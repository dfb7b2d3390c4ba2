//go:build linux

package cuda

// Tests that need a GPU. Each skips when no driver (or no device) is found, or the driver is
// pinmalloc's fake, so the package's tests pass everywhere, and fails on any other error of
// Open; one the device or driver cannot run skips naming the capability it lacks (Lacks),
// which the GPU check verifies. On a GPU machine run the test binary with -test.run CUDA (the
// GPU check does); a binary built here with `go test -c` runs there as is.

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// openGPU opens device 0, and checks at cleanup that the test freed all it allocated. It
// skips only where there is no GPU (no driver, no device); any other error fails the test
// (issue 26: a broken driver must not turn the GPU tests into skips).
func openGPU(t *testing.T) *Device {
	t.Helper()
	d, err := Open(0)
	skipWithoutGPU(t, err)
	if d.IsFake() {
		d.Close()
		t.Skip("no CUDA driver: the driver loaded is pinmalloc's fake")
	}
	t.Cleanup(func() {
		if s := d.Stats(); s.Live() != 0 {
			t.Errorf("resources leaked through the device: %+v", s)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// hostBuf maps n bytes of anonymous memory (page-aligned, never moved by Go).
func hostBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap %d: %v", n, err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func fillPattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i>>9) ^ seed
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestCUDADeviceInfo(t *testing.T) {
	d := openGPU(t)
	v, err := DriverVersion()
	must(t, "DriverVersion", err)
	n, err := Count()
	must(t, "Count", err)
	name, err := d.Name()
	must(t, "Name", err)
	total, err := d.TotalMem()
	must(t, "TotalMem", err)
	free, total2, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	major, _ := d.Attribute(AttrComputeCapabilityMajor)
	minor, _ := d.Attribute(AttrComputeCapabilityMinor)
	t.Logf("driver %d, %d device(s); device 0: %s, sm_%d%d, total %d MiB, free %d MiB, VMM %v",
		v, n, name, major, minor, total>>20, free>>20, d.VMMSupported())
	if v < 12000 || n < 1 || name == "" || total == 0 || total2 != total || free > total {
		t.Errorf("implausible device info: version %d count %d name %q total %d/%d free %d",
			v, n, name, total, total2, free)
	}
}

func TestCUDAPrimaryContextRetainRelease(t *testing.T) {
	base := PrimaryRetains()
	d1, err := Open(0)
	skipWithoutGPU(t, err)
	if d1.IsFake() {
		d1.Close()
		t.Skip("no CUDA driver: the driver loaded is pinmalloc's fake")
	}
	d2, err := Open(0)
	must(t, "second Open", err)
	if got := PrimaryRetains(); got != base+2 {
		t.Errorf("PrimaryRetains after two Opens = %d, want %d", got, base+2)
	}
	if d1.Context() != d2.Context() || d1.Context() == 0 {
		t.Errorf("primary contexts differ or are nil: %#x %#x", d1.Context(), d2.Context())
	}
	must(t, "Close d1", d1.Close())
	must(t, "Close d1 again", d1.Close())
	if got := PrimaryRetains(); got != base+1 {
		t.Errorf("PrimaryRetains after a double Close = %d, want %d", got, base+1)
	}
	if err := d1.Do(func() error { return nil }); err == nil {
		t.Errorf("Do on a closed device succeeded")
	}
	// d2 still holds the context: it must still work.
	p, err := d2.MemAlloc(1 << 20)
	must(t, "MemAlloc on d2", err)
	must(t, "MemFree on d2", d2.MemFree(p))
	must(t, "Close d2", d2.Close())
	if got := PrimaryRetains(); got != base {
		t.Errorf("PrimaryRetains after closing both = %d, want %d", got, base)
	}
	if _, err := Open(1 << 20); !errors.Is(err, pinmalloc.ErrNoDevice) {
		t.Errorf("Open(huge ordinal) = %v, want pinmalloc.ErrNoDevice", err)
	}
	if got := PrimaryRetains(); got != base {
		t.Errorf("failed Open changed PrimaryRetains to %d", got)
	}
}

func TestCUDAAllocFree(t *testing.T) {
	d := openGPU(t)
	const n = 64 << 20
	free0, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	p, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	if p == 0 {
		t.Fatal("MemAlloc returned 0")
	}
	if s := d.Stats(); s.DeviceAllocs != 1 {
		t.Errorf("Stats.DeviceAllocs = %d, want 1", s.DeviceAllocs)
	}
	free1, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	must(t, "MemsetD8", d.MemsetD8(p, 0, n))
	must(t, "MemFree", d.MemFree(p))
	t.Logf("free before %d MiB, with 64 MiB allocated %d MiB", free0>>20, free1>>20)
	if free1 > free0-n/2 {
		t.Errorf("free memory did not drop by ~64 MiB: %d -> %d", free0, free1)
	}
}

func TestCUDARoundTrip(t *testing.T) {
	d := openGPU(t)
	const n = 1 << 20
	src := make([]byte, n) // Go heap memory, pageable: synchronous copies only
	dst := make([]byte, n)
	fillPattern(src, 0x3c)
	a, err := d.MemAlloc(n)
	must(t, "MemAlloc a", err)
	defer func() { must(t, "MemFree a", d.MemFree(a)) }()
	b, err := d.MemAlloc(n)
	must(t, "MemAlloc b", err)
	defer func() { must(t, "MemFree b", d.MemFree(b)) }()
	must(t, "MemcpyHtoD", d.MemcpyHtoD(a, addr(src), n))
	must(t, "MemcpyDtoD", d.MemcpyDtoD(b, a, n))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(dst), b, n))
	if !bytes.Equal(src, dst) {
		t.Fatal("1 MiB pattern changed in the H2D, D2D, D2H round trip")
	}
	must(t, "MemsetD8", d.MemsetD8(b, 0xee, n/2))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(dst), b, n))
	if dst[0] != 0xee || dst[n/2-1] != 0xee || dst[n/2] != src[n/2] {
		t.Fatal("MemsetD8 did not set exactly the first half")
	}
}

func TestCUDAAsyncCopyEvents(t *testing.T) {
	d := openGPU(t)
	const n = 32 << 20
	src, dst := hostBuf(t, n), hostBuf(t, n)
	fillPattern(src, 0x11)
	must(t, "register src", d.MemHostRegister(addr(src), n, HostRegisterPortable))
	defer func() { must(t, "unregister src", d.MemHostUnregister(addr(src))) }()
	must(t, "register dst", d.MemHostRegister(addr(dst), n, HostRegisterPortable))
	defer func() { must(t, "unregister dst", d.MemHostUnregister(addr(dst))) }()
	p, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(p)) }()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	start, err := d.EventCreate(false)
	must(t, "EventCreate start", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(start)) }()
	end, err := d.EventCreate(false)
	must(t, "EventCreate end", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(end)) }()

	must(t, "EventRecord start", d.EventRecord(start, s))
	must(t, "MemcpyHtoDAsync", d.MemcpyHtoDAsync(p, addr(src), n, s))
	must(t, "MemcpyDtoHAsync", d.MemcpyDtoHAsync(addr(dst), p, n, s))
	must(t, "EventRecord end", d.EventRecord(end, s))
	if err := d.EventQuery(end); err != nil && !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("EventQuery while copying = %v, want nil or pinmalloc.ErrNotReady", err)
	}
	must(t, "EventSynchronize", d.EventSynchronize(end))
	must(t, "EventQuery after sync", d.EventQuery(end))
	ms, err := d.EventElapsed(start, end)
	must(t, "EventElapsed", err)
	t.Logf("32 MiB H2D + D2H registered: %.3f ms (%.1f GB/s each way)", ms, 2*float64(n)/float64(ms)/1e6)
	if ms <= 0 {
		t.Errorf("EventElapsed = %v ms", ms)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data changed in the async round trip")
	}
}

func TestCUDAStreamQueryNotReady(t *testing.T) {
	d := openGPU(t)
	const n = 1 << 30
	a, err := d.MemAlloc(n) // 2 GiB in all: a GPU that cannot give them is a GPU to look at, not a skip
	must(t, "MemAlloc a", err)
	defer func() { must(t, "MemFree a", d.MemFree(a)) }()
	b, err := d.MemAlloc(n)
	must(t, "MemAlloc b", err)
	defer func() { must(t, "MemFree b", d.MemFree(b)) }()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	must(t, "StreamQuery idle", d.StreamQuery(s))
	for i := 0; i < 16; i++ { // 16 GiB each way: tens of milliseconds even on HBM3
		must(t, "MemcpyDtoDAsync", d.MemcpyDtoDAsync(b, a, n, s))
	}
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("StreamQuery during 16 GiB of copies = %v, want pinmalloc.ErrNotReady", err)
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "StreamQuery after sync", d.StreamQuery(s))
}

// TestCUDAStreamFlags: cuStreamGetFlags says which streams are non-blocking (streamq skips the
// legacy stream's query for those), the default stream being blocking, as on the fake.
func TestCUDAStreamFlags(t *testing.T) {
	d := openGPU(t)
	nb, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	blk, err := d.StreamCreate(false)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(nb)) }()
	for _, c := range []struct {
		name string
		s    Stream
		want bool
	}{{"non-blocking", nb, true}, {"blocking", blk, false}, {"legacy default", 0, false}} {
		if got, err := d.StreamNonBlocking(c.s); err != nil || got != c.want {
			t.Errorf("StreamNonBlocking(%s) = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	must(t, "StreamDestroy", d.StreamDestroy(blk))
}

// TestCUDAStreamContext: cuStreamGetCtx gives a stream of the device its primary context, and
// the legacy default stream the current one, as on the fake; asked of a stream that captures a
// graph (as streamq's check of a stream first seen then asks it), it answers and leaves the
// capture valid.
func TestCUDAStreamContext(t *testing.T) {
	d := openGPU(t)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	for _, c := range []struct {
		name string
		s    Stream
	}{{"a stream of the device", s}, {"legacy default", 0}} {
		if got, err := d.StreamContext(c.s); err != nil || got != d.Context() {
			t.Errorf("StreamContext(%s) = %#x, %v; want %#x", c.name, got, err, d.Context())
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", d.StreamBeginCapture(s, CaptureGlobal))
	got, err := d.StreamContext(s)
	g, eerr := d.StreamEndCapture(s)
	must(t, "StreamEndCapture after StreamContext", eerr)
	must(t, "GraphDestroy", d.GraphDestroy(g))
	if err != nil || got != d.Context() {
		t.Errorf("StreamContext of a capturing stream = %#x, %v; want %#x", got, err, d.Context())
	}
}

// TestCUDABatchRefusesLegacyStream: cuMemcpyBatchAsync refuses the legacy default stream by
// either handle, 0 or CU_STREAM_LEGACY (1), as the fake does; copyengine fences both through a
// side stream. A stream of one's own is taken.
func TestCUDABatchRefusesLegacyStream(t *testing.T) {
	d := openGPU(t)
	if err := d.MemcpyBatchSupported(); err != nil {
		if v, verr := DriverVersion(); verr == nil && v < 13000 {
			t.Skip(Lacks(CapBatchAPI, err.Error()))
		}
		t.Fatalf("a CUDA 13.0 driver without the batch API: %v", err)
	}
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	defer d.MemFree(p)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	dsts, srcs, sizes := []uintptr{uintptr(p) + 2048}, []uintptr{uintptr(p)}, []uintptr{1024}
	for _, legacy := range []Stream{0, 1} {
		if err := d.MemcpyBatchAsync(dsts, srcs, sizes, 0, legacy); !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("batch on the legacy stream (handle %d): %v, want pinmalloc.ErrInvalidValue", legacy, err)
		}
	}
	must(t, "batch on a stream of its own", d.MemcpyBatchAsync(dsts, srcs, sizes, 0, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
}

func TestCUDAVMM(t *testing.T) {
	d := openGPU(t)
	if !d.VMMSupported() {
		t.Skip(Lacks(CapVMM, "device attribute 102 is 0"))
	}
	minG, recG, err := d.MemGetAllocationGranularity()
	must(t, "MemGetAllocationGranularity", err)
	t.Logf("VMM granularity: minimum %d KiB, recommended %d KiB", minG>>10, recG>>10)
	if minG == 0 || minG&(minG-1) != 0 || recG < minG {
		t.Fatalf("implausible granularity %d / %d", minG, recG)
	}
	g := recG
	const chunks = 32 // 64 MiB at 2 MiB granules
	size := chunks * g
	half := size / 2
	p, err := d.MemAddressReserve(size, 0)
	must(t, "MemAddressReserve", err)
	defer func() { must(t, "MemAddressFree", d.MemAddressFree(p, size)) }()

	free0, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	h1, err := d.MemCreate(half)
	must(t, "MemCreate h1", err)
	h2, err := d.MemCreate(half)
	must(t, "MemCreate h2", err)
	must(t, "MemMap h1", d.MemMap(p, half, h1))
	must(t, "MemMap h2", d.MemMap(p+half, half, h2))
	must(t, "MemSetAccess", d.MemSetAccess(p, size))
	free1, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)

	must(t, "MemsetD8", d.MemsetD8(p, 0xab, size))
	out := hostBuf(t, int(g))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(out), p+size-g, g))
	if out[0] != 0xab || out[g-1] != 0xab {
		t.Fatal("mapped VMM memory did not hold the memset value")
	}

	// Decommit the upper half (unmap + release), then commit it again with a new handle.
	must(t, "MemUnmap h2", d.MemUnmap(p+half, half))
	must(t, "MemRelease h2", d.MemRelease(h2))
	free2, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	h3, err := d.MemCreate(half)
	must(t, "MemCreate h3", err)
	must(t, "MemMap h3", d.MemMap(p+half, half, h3))
	must(t, "MemSetAccess h3", d.MemSetAccess(p+half, half))
	must(t, "MemsetD8 h3", d.MemsetD8(p+half, 0xcd, half))
	must(t, "MemcpyDtoH h3", d.MemcpyDtoH(addr(out), p+size-g, g))
	if out[0] != 0xcd {
		t.Fatal("recommitted VMM memory did not hold the memset value")
	}
	must(t, "MemUnmap h1", d.MemUnmap(p, half))
	must(t, "MemUnmap h3", d.MemUnmap(p+half, half))
	must(t, "MemRelease h1", d.MemRelease(h1))
	must(t, "MemRelease h3", d.MemRelease(h3))
	free3, _, err := d.MemGetInfo()
	must(t, "MemGetInfo", err)
	t.Logf("free MiB: before %d, %d MiB mapped %d, half decommitted %d, all released %d",
		free0>>20, size>>20, free1>>20, free2>>20, free3>>20)
	if free1 > free0-size/2 {
		t.Errorf("MemCreate+MemMap of %d MiB did not lower free memory: %d -> %d", size>>20, free0, free1)
	}
	if free2 < free1+half/2 {
		t.Errorf("unmap+release of %d MiB did not raise free memory: %d -> %d", half>>20, free1, free2)
	}
	if s := d.Stats(); s.Handles != 0 || s.Reservations != 1 {
		t.Errorf("Stats = %+v, want 0 handles and 1 reservation", s)
	}
}

func TestCUDAManaged(t *testing.T) {
	d := openGPU(t)
	if v, _ := d.Attribute(AttrManagedMemory); v == 0 {
		t.Skip(Lacks(CapManaged, "device attribute 83 is 0"))
	}
	const n = 64 << 20
	p, err := d.MemAllocManaged(n, MemAttachGlobal)
	must(t, "MemAllocManaged", err)
	defer func() { must(t, "MemFreeManaged", d.MemFreeManaged(p)) }()
	must(t, "MemsetD8", d.MemsetD8(p, 0x5a, n))
	must(t, "Synchronize", d.Synchronize())
	if v, _ := d.Attribute(AttrConcurrentManagedAccess); v == 0 {
		t.Skip(Lacks(CapConcurrentManaged, "device attribute 89 is 0: prefetch and advice not testable"))
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	must(t, "MemAdvise preferred device", d.MemAdvise(p, n, adviseSetPreferredLocation, deviceLoc(d)))
	must(t, "MemAdvise accessed by device", d.MemAdvise(p, n, adviseSetAccessedBy, deviceLoc(d)))
	must(t, "MemAdvise read mostly", d.MemAdvise(p, n, adviseSetReadMostly, deviceLoc(d)))
	must(t, "MemAdvise unset read mostly", d.MemAdvise(p, n, adviseUnsetReadMostly, deviceLoc(d)))
	start, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(start)) }()
	mid, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(mid)) }()
	end, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(end)) }()
	must(t, "EventRecord", d.EventRecord(start, s))
	must(t, "prefetch to device", d.MemPrefetchAsync(p, n, deviceLoc(d), s))
	must(t, "EventRecord", d.EventRecord(mid, s))
	must(t, "prefetch to host", d.MemPrefetchAsync(p, n, hostLoc, s))
	must(t, "EventRecord", d.EventRecord(end, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	toDev, _ := d.EventElapsed(start, mid)
	toHost, _ := d.EventElapsed(mid, end)
	t.Logf("managed 64 MiB prefetch: to device %.3f ms, to host %.3f ms", toDev, toHost)
	must(t, "MemAdvise unset preferred", d.MemAdvise(p, n, adviseUnsetPreferredLocation, deviceLoc(d)))
	out := hostBuf(t, 1<<20)
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(out), p+n-(1<<20), 1<<20))
	if out[0] != 0x5a || out[len(out)-1] != 0x5a {
		t.Fatal("managed memory lost its contents across prefetches")
	}
}

func TestCUDAHostRegister(t *testing.T) {
	d := openGPU(t)
	const n = 4 << 20
	h, back := hostBuf(t, n), hostBuf(t, n)
	fillPattern(h, 0x77)
	must(t, "MemHostRegister", d.MemHostRegister(addr(h), n, HostRegisterDeviceMap|HostRegisterPortable))
	if err := d.MemHostRegister(addr(h), n, 0); !errors.Is(err, pinmalloc.ErrAlreadyRegistered) {
		t.Errorf("second MemHostRegister = %v, want pinmalloc.ErrAlreadyRegistered", err)
	}
	if s := d.Stats(); s.HostRegistrations != 1 {
		t.Errorf("Stats.HostRegistrations = %d after a failed second register, want 1", s.HostRegistrations)
	}
	dp, err := d.MemHostGetDevicePointer(addr(h))
	must(t, "MemHostGetDevicePointer", err)
	t.Logf("registered host %#x maps to device %#x", addr(h), dp)
	p, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	must(t, "MemcpyDtoD from mapped host", d.MemcpyDtoD(p, dp, n))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(back), p, n))
	must(t, "MemFree", d.MemFree(p))
	if !bytes.Equal(h, back) {
		t.Fatal("copy through the mapped device pointer changed the data")
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(addr(h)))
	if err := d.MemHostUnregister(addr(h)); err == nil {
		t.Errorf("second MemHostUnregister succeeded")
	} else {
		t.Logf("second unregister: %v", err)
	}
	if s := d.Stats(); s.HostRegistrations != 0 {
		t.Errorf("Stats.HostRegistrations = %d after unregistering (and a failed second try)", s.HostRegistrations)
	}
	switch err := d.MemHostRegister(addr(h), 0, 0); {
	case err == nil:
		t.Logf("the driver accepted a 0-byte registration")
		must(t, "MemHostUnregister", d.MemHostUnregister(addr(h)))
	case !errors.Is(err, pinmalloc.ErrInvalidValue):
		t.Errorf("MemHostRegister of 0 bytes = %v, want pinmalloc.ErrInvalidValue", err)
	}
}

func TestCUDAHostAlloc(t *testing.T) {
	d := openGPU(t)
	const n = 4 << 20
	hp, err := d.MemHostAlloc(n, HostAllocDeviceMap|HostAllocPortable)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d.MemFreeHost(hp)) }()
	dp, err := d.MemHostGetDevicePointer(hp)
	must(t, "MemHostGetDevicePointer", err)
	must(t, "MemsetD8 on mapped host memory", d.MemsetD8(dp, 0x42, n))
	must(t, "Synchronize", d.Synchronize())
	p, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(p)) }()
	must(t, "MemcpyHtoD from pinned", d.MemcpyHtoD(p, hp, n))
	out := hostBuf(t, n)
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(out), p, n))
	if out[0] != 0x42 || out[n-1] != 0x42 {
		t.Fatal("pinned host allocation did not round-trip")
	}
}

func TestCUDAOutOfMemory(t *testing.T) {
	d := openGPU(t)
	p, err := d.MemAlloc(1 << 50)
	if err == nil {
		_ = d.MemFree(p)
		t.Fatal("MemAlloc(1<<50) succeeded")
	}
	if !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Fatalf("MemAlloc(1<<50) = %v, want pinmalloc.ErrOutOfMemory", err)
	}
	t.Logf("MemAlloc(1<<50): %v", err)
	var r Result
	if !errors.As(err, &r) || r != 2 {
		t.Errorf("error is not Result 2: %#v", err)
	}
	if s := d.Stats(); s.DeviceAllocs != 0 {
		t.Errorf("a failed MemAlloc was counted")
	}
}

func TestCUDAInvalidHandle(t *testing.T) {
	d := openGPU(t)
	a, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(a)) }()
	b, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(b)) }()
	must(t, "EventRecord", d.EventRecord(a, 0))
	must(t, "EventRecord", d.EventRecord(b, 0))
	must(t, "EventSynchronize", d.EventSynchronize(b))
	if _, err := d.EventElapsed(a, b); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("EventElapsed of timing-disabled events = %v, want pinmalloc.ErrInvalidHandle", err)
	}
	c, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(c)) }()
	e, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(e)) }()
	if _, err := d.EventElapsed(c, e); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("EventElapsed of never-recorded events = %v, want pinmalloc.ErrInvalidHandle", err)
	}
	// A made-up or destroyed CUstream is not tested: the driver dereferences stream handles
	// without validating them (undefined behaviour, not an error code); the invalid-handle path
	// is covered by the event cases above.
}

func TestCUDAEventPool(t *testing.T) {
	d := openGPU(t)
	pool := NewEventPool(d)
	var evs []Event
	for i := 0; i < 4; i++ {
		ev, err := pool.Get()
		must(t, "Get", err)
		must(t, "EventRecord", d.EventRecord(ev, 0))
		evs = append(evs, ev)
	}
	for _, ev := range evs {
		must(t, "EventSynchronize", d.EventSynchronize(ev))
		pool.Put(ev)
	}
	for i := 0; i < 4; i++ {
		ev, err := pool.Get()
		must(t, "Get again", err)
		pool.Put(ev)
	}
	if pool.Created() != 4 || pool.Idle() != 4 {
		t.Errorf("created %d, idle %d; want 4 and 4 (events reused)", pool.Created(), pool.Idle())
	}
	if s := d.Stats(); s.Events != 4 {
		t.Errorf("Stats.Events = %d, want 4", s.Events)
	}
	must(t, "Close", pool.Close())
	if pool.Destroyed() != pool.Created() {
		t.Errorf("created %d, destroyed %d", pool.Created(), pool.Destroyed())
	}
}

func TestCUDAAsyncAlloc(t *testing.T) {
	d := openGPU(t)
	if v, _ := d.Attribute(AttrMemoryPoolsSupported); v == 0 {
		t.Skip(Lacks(CapMemoryPools, "device attribute 115 is 0"))
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	for i := 0; i < 100; i++ {
		p, err := d.MemAllocAsync(1<<20, s)
		must(t, "MemAllocAsync", err)
		must(t, "MemsetD8Async", d.MemsetD8Async(p, byte(i), 1<<20, s))
		must(t, "MemFreeAsync", d.MemFreeAsync(p, s))
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
}

// TestCUDAConcurrentGoroutines runs driver calls from many goroutines at once; each call must
// find the primary context current whatever thread its goroutine runs on.
func TestCUDAConcurrentGoroutines(t *testing.T) {
	d := openGPU(t)
	const n = 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(seed byte) {
			defer wg.Done()
			src, dst := make([]byte, n), make([]byte, n)
			fillPattern(src, seed)
			for i := 0; i < 20; i++ {
				p, err := d.MemAlloc(n)
				if err != nil {
					errs <- err
					return
				}
				err = d.MemcpyHtoD(p, addr(src), n)
				if err == nil {
					err = d.MemcpyDtoH(addr(dst), p, n)
				}
				if ferr := d.MemFree(p); err == nil {
					err = ferr
				}
				if err == nil && !bytes.Equal(src, dst) {
					err = errors.New("data mismatch")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(byte(g))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// skipWithoutGPU skips the test when err says there is no driver or no device, and fails it
// on any other error of Open.
func skipWithoutGPU(t *testing.T, err error) {
	t.Helper()
	switch {
	case errors.Is(err, pinmalloc.ErrNoDriver):
		t.Skip(err) // the error says "cuda: no CUDA driver" and why
	case errors.Is(err, pinmalloc.ErrNoDevice):
		t.Skip(err) // "cuda: no CUDA device" and why
	case err != nil:
		t.Fatalf("the driver loads but device 0 does not open: %v", err)
	}
}

// TestCUDAHostMemPool creates a pool in host memory (HOST_NUMA, node of the device or 0) where
// the device says it makes them (HostPoolSupport: its attribute, not the driver's version),
// grants device 0 access, allocates from it on a stream, copies through it both ways and checks
// the bytes, the release threshold and the reserved figure. Where the device says it does not,
// the create must be refused, and the test skips naming the capability.
func TestCUDAHostMemPool(t *testing.T) {
	d := openGPU(t)
	supported, how, err := d.HostPoolSupport(LocationHostNUMA)
	must(t, "HostPoolSupport", err)
	node, ok := d.HostNUMAID()
	if !ok {
		node = 0
	}
	p, err := d.MemPoolCreate(MemPoolProps{Location: MemLocation{Type: LocationHostNUMA, ID: int32(node)}})
	if !supported {
		if err == nil {
			d.MemPoolDestroy(p)
			t.Fatalf("the device says it makes no HOST_NUMA pools (%s), yet it made one", how)
		}
		t.Skip(Lacks(CapHostNUMAPools, how+"; cuMemPoolCreate: "+err.Error()))
	}
	must(t, "MemPoolCreate(host NUMA)", err)
	defer func() { must(t, "MemPoolDestroy", d.MemPoolDestroy(p)) }()
	must(t, "MemPoolSetAttribute(threshold)", d.MemPoolSetAttribute(p, PoolAttrReleaseThreshold, ^uint64(0)))
	must(t, "MemPoolSetAccess", d.MemPoolSetAccess(p, []MemLocation{{Type: LocationDevice, ID: int32(d.Ordinal())}}, false))
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	const n = 4 << 20
	h, err := d.MemAllocFromPoolAsync(n, p, s)
	must(t, "MemAllocFromPoolAsync", err)
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	buf := mem.Bytes(uintptr(h), n) // host memory from the pool
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	dev, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dev)) }()
	must(t, "HtoD", d.MemcpyHtoDAsync(dev, uintptr(h), n, s))
	must(t, "memset", d.MemsetD8Async(DevicePtr(h), 0, n, s))
	must(t, "DtoH", d.MemcpyDtoHAsync(uintptr(h), dev, n, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	for i := range buf {
		if buf[i] != byte(i*13) {
			t.Fatalf("byte %d: %d, want %d", i, buf[i], byte(i*13))
		}
	}
	must(t, "MemFreeAsync", d.MemFreeAsync(DevicePtr(h), s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if r, err := d.MemPoolGetAttribute(p, PoolAttrReservedMemCurrent); err != nil || r < n {
		t.Errorf("reserved after a synchronize with the threshold at UINT64_MAX: %d, %v; want >= %d", r, err, n)
	}
	must(t, "MemPoolTrimTo", d.MemPoolTrimTo(p, 0))
}
