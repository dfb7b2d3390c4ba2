package fakecuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// hostNUMA0 is host NUMA node 0, the location of the host pools below.
var hostNUMA0 = cuda.MemLocation{Type: cuda.LocationHostNUMA, ID: 0}

// hostPool creates a pool on host NUMA node 0 and destroys it at the end of the test.
func hostPool(t *testing.T, d *cuda.Device) cuda.MemPool {
	t.Helper()
	p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: hostNUMA0})
	must(t, "MemPoolCreate(host NUMA 0)", err)
	t.Cleanup(func() { must(t, "MemPoolDestroy", d.MemPoolDestroy(p)) })
	return p
}

// TestFakeHostPoolInvisibleUntilSetAccess checks the fake's first pool rule: a host pool's
// memory is CPU memory from the start but no device's until cuMemPoolSetAccess grants it (a
// copy refused at the call), and then for every allocation, past and future; a block freed back
// to the pool is no buffer to copy from.
func TestFakeHostPoolInvisibleUntilSetAccess(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	p := hostPool(t, d)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	const n = 1 << 20
	h, err := d.MemAllocFromPoolAsync(n, p, s)
	must(t, "MemAllocFromPoolAsync", err)
	buf := mem.Bytes(uintptr(h), n)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	dst, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dst)) }()
	wantErr(t, "HtoD from a host pool without access", d.MemcpyHtoDAsync(dst, uintptr(h), n, s), pinmalloc.ErrInvalidValue)
	wantErr(t, "DtoH into a host pool without access", d.MemcpyDtoHAsync(uintptr(h), dst, n, s), pinmalloc.ErrInvalidValue)
	must(t, "MemPoolSetAccess", d.MemPoolSetAccess(p, []cuda.MemLocation{dev0}, false))
	must(t, "HtoD with access", d.MemcpyHtoDAsync(dst, uintptr(h), n, s))
	h2, err := d.MemAllocFromPoolAsync(n, p, s) // a later allocation: access already granted
	must(t, "MemAllocFromPoolAsync", err)
	must(t, "DtoH into a later allocation", d.MemcpyDtoHAsync(uintptr(h2), dst, n, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	got := mem.Bytes(uintptr(h2), n)
	for i := range got {
		if got[i] != byte(i*7) {
			t.Fatalf("byte %d after the round trip: %d, want %d", i, got[i], byte(i*7))
		}
	}
	if before := f.Stat(PinnedCopies); before < 2 {
		t.Errorf("pinned copies %d: a host pool's copies are pinned copies", before)
	}
	wantErr(t, "MemPoolSetAccess for a device that does not exist", d.MemPoolSetAccess(p, []cuda.MemLocation{{Type: cuda.LocationDevice, ID: 5}}, false), pinmalloc.ErrInvalidValue)
	must(t, "MemFreeAsync", d.MemFreeAsync(h, s))
	must(t, "MemFreeAsync", d.MemFreeAsync(h2, s))
	must(t, "MemPoolSetAttribute(threshold max)", d.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, math.MaxUint64))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	wantErr(t, "HtoD from a block freed back to the pool", d.MemcpyHtoDAsync(dst, uintptr(h), n, s), pinmalloc.ErrInvalidValue)
	must(t, "MemPoolSetAccess revoke", d.MemPoolSetAccess(p, []cuda.MemLocation{dev0}, true))
	h3, err := d.MemAllocFromPoolAsync(n, p, s)
	must(t, "MemAllocFromPoolAsync", err)
	wantErr(t, "HtoD after the access is revoked", d.MemcpyHtoDAsync(dst, uintptr(h3), n, s), pinmalloc.ErrInvalidValue)
	must(t, "MemFreeAsync", d.MemFreeAsync(h3, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
}

// TestFakeHostPoolCannotBeExported checks that a pool in host memory takes no shareable handle
// type (CUDA_ERROR_NOT_SUPPORTED) where a device pool does, and that HOST_NUMA_CURRENT and a
// node that does not exist are refused.
func TestFakeHostPoolCannotBeExported(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const posixFD = 1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	for _, loc := range []cuda.MemLocation{hostNUMA0, {Type: cuda.LocationHost}} {
		_, err := d.MemPoolCreate(cuda.MemPoolProps{Location: loc, HandleTypes: posixFD})
		wantErr(t, "MemPoolCreate of an exportable host pool", err, pinmalloc.ErrNotSupported)
	}
	for _, loc := range []cuda.MemLocation{{Type: 4}, {Type: cuda.LocationHostNUMA, ID: 5}, {Type: cuda.LocationDevice, ID: 3}} {
		_, err := d.MemPoolCreate(cuda.MemPoolProps{Location: loc})
		wantErr(t, "MemPoolCreate at a bad location", err, pinmalloc.ErrInvalidValue)
	}
	p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: dev0, HandleTypes: posixFD})
	must(t, "MemPoolCreate of an exportable device pool", err)
	must(t, "MemPoolDestroy", d.MemPoolDestroy(p))
	if st := d.Stats(); st.Pools != 0 {
		t.Errorf("pools live: %d", st.Pools)
	}
}

// TestFakePoolReleaseThreshold checks that a pool keeps freed memory up to its release
// threshold and releases the rest at the next synchronize: with the default threshold of 0 a
// synchronize empties it (the rmm#2379 trap), with UINT64_MAX the memory stays and the next
// allocation reuses it, and MemPoolTrimTo releases it at once.
func TestFakePoolReleaseThreshold(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	p := hostPool(t, d)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	reserved := func() uint64 {
		v, err := d.MemPoolGetAttribute(p, cuda.PoolAttrReservedMemCurrent)
		must(t, "MemPoolGetAttribute(reserved)", err)
		return v
	}
	const n = 64 << 10
	cycle := func() cuda.DevicePtr {
		h, err := d.MemAllocFromPoolAsync(n, p, s)
		must(t, "MemAllocFromPoolAsync", err)
		must(t, "MemFreeAsync", d.MemFreeAsync(h, s))
		if got := reserved(); got != n {
			t.Errorf("reserved before the synchronize: %d, want %d", got, n)
		}
		must(t, "StreamSynchronize", d.StreamSynchronize(s))
		return h
	}
	cycle()
	if got := reserved(); got != 0 {
		t.Errorf("threshold 0: reserved after a synchronize %d, want 0", got)
	}
	must(t, "MemPoolSetAttribute", d.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, math.MaxUint64))
	if v, err := d.MemPoolGetAttribute(p, cuda.PoolAttrReleaseThreshold); err != nil || v != math.MaxUint64 {
		t.Errorf("threshold read back %d, %v", v, err)
	}
	first := cycle()
	if got := reserved(); got != n {
		t.Errorf("threshold max: reserved after a synchronize %d, want %d", got, n)
	}
	if again := cycle(); again != first {
		t.Errorf("the next allocation took new memory (%#x, was %#x)", again, first)
	}
	if used, _ := d.MemPoolGetAttribute(p, cuda.PoolAttrUsedMemCurrent); used != 0 {
		t.Errorf("used %d with nothing live", used)
	}
	wantErr(t, "setting the reserved figure", d.MemPoolSetAttribute(p, cuda.PoolAttrReservedMemCurrent, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemPoolTrimTo", d.MemPoolTrimTo(p, 0))
	if got := reserved(); got != 0 {
		t.Errorf("after MemPoolTrimTo(0): reserved %d", got)
	}
}

// TestFakeHostPoolsByDriverVersion checks the emulation of older drivers (SetDriverVersion): a
// driver before 12.6 refuses host locations (CUDA_ERROR_NOT_SUPPORTED) and makes device pools;
// 12.6 to 12.8 make HOST_NUMA pools without knowing attribute 142 (CUDA_ERROR_INVALID_VALUE);
// 12.9 knows it; HOST pools and attribute 144 come with 13.0. HostPoolSupport answers by the
// attribute, and by making a pool where the driver is too old to know it.
func TestFakeHostPoolsByDriverVersion(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	defer f.SetDriverVersion(13000)
	host := cuda.MemLocation{Type: cuda.LocationHost}
	for _, c := range []struct {
		version          int
		numa, hostLoc    bool // pools made at HOST_NUMA, at HOST
		attr142, attr144 bool // the driver knows the attribute
	}{{12040, false, false, false, false}, {12060, true, false, false, false}, {12090, true, false, true, false}, {13000, true, true, true, true}} {
		if !f.SetDriverVersion(c.version) {
			t.Fatalf("SetDriverVersion(%d) refused", c.version)
		}
		if v, err := cuda.DriverVersion(); err != nil || v != c.version {
			t.Fatalf("DriverVersion = %d, %v; want %d", v, err, c.version)
		}
		for _, l := range []struct {
			loc      cuda.MemLocation
			made     bool
			attr     int
			attrKnow bool
		}{{hostNUMA0, c.numa, cuda.AttrHostNUMAMemoryPoolsSupported, c.attr142}, {host, c.hostLoc, cuda.AttrHostMemoryPoolsSupported, c.attr144}} {
			p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: l.loc})
			if l.made {
				must(t, "MemPoolCreate", err)
				must(t, "MemPoolDestroy", d.MemPoolDestroy(p))
			} else {
				wantErr(t, "MemPoolCreate on an old driver", err, pinmalloc.ErrNotSupported)
			}
			v, err := d.Attribute(l.attr)
			if l.attrKnow && (err != nil || v != 1) || !l.attrKnow && !errors.Is(err, pinmalloc.ErrInvalidValue) {
				t.Errorf("driver %d: attribute %d = %d, %v (known: %v)", c.version, l.attr, v, err, l.attrKnow)
			}
			ok, how, err := d.HostPoolSupport(l.loc.Type)
			if err != nil || ok != l.made || how == "" {
				t.Errorf("driver %d: HostPoolSupport(%d) = %v, %q, %v; want %v", c.version, l.loc.Type, ok, how, err, l.made)
			}
		}
		p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: dev0})
		must(t, "MemPoolCreate(device)", err)
		must(t, "MemPoolDestroy", d.MemPoolDestroy(p))
	}
	if f.SetDriverVersion(5) {
		t.Error("SetDriverVersion(5) accepted")
	}
	if _, err := d.Attribute(400); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("attribute 400: %v, want CUDA_ERROR_INVALID_VALUE (past the attributes of CUDA 13.0)", err)
	}
}

// TestFakeDefaultPool checks the default pool's rules: cuMemAllocAsync draws from it; its
// release threshold, 0 by default, empties it at a synchronize, so the next allocation maps new
// memory; at UINT64_MAX (PyTorch's setting) it keeps what came back (the chunk it reserved),
// and the next allocation of that size gets the same block; the driver's pool cannot be
// destroyed; memory freed back to it is no allocation to use.
func TestFakeDefaultPool(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	p, err := d.DefaultMemPool()
	must(t, "DefaultMemPool", err)
	if q, err := d.DefaultMemPool(); err != nil || q != p || p == 0 {
		t.Fatalf("DefaultMemPool again = %#x, %v; want %#x", q, err, p)
	}
	wantErr(t, "MemPoolDestroy of the default pool", d.MemPoolDestroy(p), pinmalloc.ErrInvalidValue)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	const n = 1 << 20
	reserved := func() uint64 {
		v, err := d.MemPoolGetAttribute(p, cuda.PoolAttrReservedMemCurrent)
		must(t, "MemPoolGetAttribute", err)
		return v
	}
	cycle := func() uint64 { // allocate, free, synchronize: what the pool holds after
		q, err := d.MemAllocAsync(n, s)
		must(t, "MemAllocAsync", err)
		must(t, "MemsetD8Async", d.MemsetD8Async(q, 1, n, s))
		must(t, "MemFreeAsync", d.MemFreeAsync(q, s))
		must(t, "StreamSynchronize", d.StreamSynchronize(s))
		return reserved()
	}
	if got := cycle(); got != 0 {
		t.Errorf("threshold 0: the default pool holds %d bytes after a synchronize, want 0", got)
	}
	must(t, "MemPoolSetAttribute", d.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, math.MaxUint64))
	defer func() { must(t, "MemPoolSetAttribute", d.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, 0)) }()
	if got := cycle(); got != poolChunk {
		t.Errorf("threshold UINT64_MAX: the default pool holds %d bytes after a synchronize, want %d (a chunk)", got, poolChunk)
	}
	a, err := d.MemAllocAsync(n, s)
	must(t, "MemAllocAsync", err)
	must(t, "MemFreeAsync", d.MemFreeAsync(a, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	b, err := d.MemAllocAsync(n, s)
	must(t, "MemAllocAsync", err)
	if a != b {
		t.Errorf("the kept block was not reused: %#x, then %#x", a, b)
	}
	must(t, "MemFreeAsync", d.MemFreeAsync(b, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	wantErr(t, "a memset of memory back in the pool", d.MemsetD8Async(b, 0, n, s), pinmalloc.ErrInvalidValue)
	must(t, "MemPoolTrimTo", d.MemPoolTrimTo(p, 0))

	// Same-stream reuse: a thousand 1 MiB pairs on one stream with no synchronize hold one block,
	// in one chunk, on a device of 64 MiB.
	f.SetMemory(0, 64<<20)
	defer f.SetMemory(0, 1<<30)
	for i := range 1000 {
		q, err := d.MemAllocAsync(n, s)
		must(t, fmt.Sprintf("MemAllocAsync %d", i), err)
		must(t, "MemsetD8Async", d.MemsetD8Async(q, byte(i), n, s))
		must(t, "MemFreeAsync", d.MemFreeAsync(q, s))
	}
	if got := reserved(); got != poolChunk {
		t.Errorf("after 1000 pairs on one stream the pool holds %d bytes, want %d (a chunk): memory freed on a stream is that stream's again at once", got, poolChunk)
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "MemPoolTrimTo", d.MemPoolTrimTo(p, 0))
}

// TestFakePoolChunks checks how the fake carves a device pool's chunks (fakedriver.c.in,
// "Memory pools"): blocks coming back merge with the cached blocks beside them, so that a
// bigger allocation fits where two small ones were; a chunk the device has no room for gives
// way to the allocation alone, rounded up to the 2 MiB granule, and the pool is out of memory
// only when that does not fit either; a pool destroyed with an allocation live gives its
// chunks back, the last with that allocation's free.
func TestFakePoolChunks(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: dev0})
	must(t, "MemPoolCreate", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	alloc := func(n uintptr) cuda.DevicePtr {
		q, err := d.MemAllocFromPoolAsync(n, p, s)
		must(t, "MemAllocFromPoolAsync", err)
		return q
	}
	a, b, c := alloc(1000), alloc(100), alloc(512)
	if b != a+1024 || c != b+512 {
		t.Errorf("blocks at %#x, %#x, %#x: want each after the one before, in 512 B steps", a, b, c)
	}
	must(t, "MemFreeAsync", d.MemFreeAsync(b, s))
	must(t, "MemFreeAsync", d.MemFreeAsync(a, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s)) // threshold 0: c keeps the chunk
	if got := alloc(1536); got != a {
		t.Errorf("1536 B after freeing the 1024 and the 512 before c: at %#x, want %#x (merged)", got, a)
	}
	if used := f.Used(0); used != poolChunk {
		t.Fatalf("device memory used %d, want one chunk", used)
	}

	f.SetMemory(0, poolChunk+8<<20)
	defer f.SetMemory(0, 1<<30)
	fill := alloc(31 << 20) // in the chunk, which has 1 MiB left
	big := alloc(5 << 20)   // no room for a second chunk: 6 MiB, the 2 MiB granule's multiple
	if r, _ := d.MemPoolGetAttribute(p, cuda.PoolAttrReservedMemCurrent); r != poolChunk+6<<20 {
		t.Errorf("reserved %d after 5 MiB with 8 MiB left on the device, want a chunk and 6 MiB", r)
	}
	if q, err := d.MemAllocFromPoolAsync(4<<20, p, s); !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("4 MiB with 2 MiB left on the device: %#x, %v; want out of memory", q, err)
	}
	must(t, "MemFreeAsync", d.MemFreeAsync(big, s))
	must(t, "MemFreeAsync", d.MemFreeAsync(fill, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "MemPoolDestroy", d.MemPoolDestroy(p)) // c and the 1536 are live: their chunk stays
	if used := f.Used(0); used != poolChunk {
		t.Errorf("device memory used %d after the destroy, want the chunk of the live blocks", used)
	}
	must(t, "MemFreeAsync", d.MemFreeAsync(c, s))
	must(t, "MemFreeAsync", d.MemFreeAsync(a, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if used := f.Used(0); used != 0 {
		t.Errorf("device memory used %d once the destroyed pool's last block is back, want 0", used)
	}
}
